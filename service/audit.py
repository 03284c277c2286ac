"""Audit events: one per committed version, each carrying the RFC 6902 patch of the state."""

from __future__ import annotations

import time

from service.jsondiff import diff
from service.store.docs import DocStore


def patch(a: dict, b: dict) -> list:
    """The RFC 6902 patch turning `a` into `b` (service.jsondiff; its values share `b`'s subtrees)."""
    return diff(a, b)


def make_event(version: int, kind: str, before: dict, after: dict, **fields) -> dict:
    """kind: observe | harness | env | control | end | consolidate."""
    ev = {"version": version, "kind": kind, "verb": None, "arg": None, "reason": None, "result": None,
          "patch": patch(before, after), "usage": None, "model": None, "at": round(time.time(), 3)}
    ev.update(fields)
    return ev


async def page(docs: DocStore, doc_id: str, after: int, limit: int) -> dict:
    evs = await docs.events(doc_id, after=after, limit=limit + 1)
    more = len(evs) > limit
    evs = evs[:limit]
    return {"events": evs, "next": evs[-1]["version"] if more and evs else None}
