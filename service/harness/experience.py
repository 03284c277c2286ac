"""Read-side of the Experience bank: scoring entries against a query (used by `recall` and panels)."""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9]+")
_STOP = {"a", "an", "the", "to", "in", "on", "of", "and", "is", "it", "at", "for", "with", "some", "then", "put"}


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def top_k_entries(entries: dict, query: str, k: int) -> list[dict]:
    """Entries ranked by word overlap with the query (ties: more evidence, then id)."""
    q = words(query)
    scored = []
    for e in entries.values():
        ew = words(e["text"]) | words(e.get("key") or "")
        overlap = len(q & ew)
        if overlap:
            scored.append((-overlap, -e.get("evidence", 0), e["id"], e))
    scored.sort(key=lambda t: t[:3])
    return [t[3] for t in scored[:k]]


def format_entries(entries: list[dict]) -> str:
    return "; ".join(f"[{e['category']}] {e['text']}" for e in entries)
