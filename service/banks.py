"""Experience-bank use-cases: read, buffer evidence, consolidate (evolver), controls and pins."""

from __future__ import annotations

import copy
import json
import time

import jsonpatch

from service import audit as audit_log
from service.audit import make_event, patch
from service import metrics
from service.api.errors import ApiError
from service.bank.evolver import CATEGORIES, consolidate, new_bank
from service.store.docs import DocGone, DocStore




class BankService:
    def __init__(self, docs: DocStore, cap: int = 80, lease_ms: int = 120_000):
        self.docs, self.cap, self.lease_ms = docs, cap, lease_ms

    async def ensure(self, name: str, tenant: str = "default") -> None:
        if not await self.docs.exists(name):
            await self.docs.create(name, new_bank(self.cap), {"tenant": tenant})

    async def read(self, name: str) -> dict:
        """The bank state sessions read at each step (empty bank if it was never created)."""
        try:
            return (await self.docs.load(name)).state
        except DocGone:
            return new_bank(self.cap)

    async def _meta(self, name: str, tenant: str) -> dict:
        try:
            meta = await self.docs.meta(name)
        except DocGone:
            raise ApiError(404, "Bank not found", f"no bank {name!r}") from None
        if meta.get("tenant", "default") != tenant:
            raise ApiError(404, "Bank not found", f"no bank {name!r}")
        return meta

    async def show(self, name: str, tenant: str = "default") -> dict:
        await self._meta(name, tenant)
        loaded = await self.docs.load(name)
        pending = await self.docs.evidence(name)
        self._gauge(name, loaded.state)
        return {"name": name, "version": loaded.version, "pending_evidence": len(pending), **loaded.state}

    async def add_evidence(self, name: str, session_id: str, evidence: dict) -> bool:
        await self.ensure(name)
        return await self.docs.add_evidence(name, session_id, {"session_id": session_id, **evidence})

    def _gauge(self, name: str, state: dict) -> None:
        for c in CATEGORIES:
            n = sum(e["category"] == c for e in state["entries"].values())
            metrics.BANK_ENTRIES.labels(name, c).set(n)

    async def _locked(self, name: str):
        token = await self.docs.acquire(name, self.lease_ms)
        if token is None:
            raise ApiError(409, "Bank busy", f"bank {name!r} is being changed by another request")
        return token

    async def consolidate(self, name: str, tenant: str = "default", key_id: str | None = None) -> dict:
        await self._meta(name, tenant)
        token = await self._locked(name)
        try:
            loaded = await self.docs.load(name)
            pending = await self.docs.evidence(name)
            if not pending:
                return {"version": loaded.version, "ops": [], "evidence": 0}
            stamp = loaded.version + 1
            new, ops = consolidate(loaded.state, list(pending.values()), stamp)
            ev = make_event(stamp, "consolidate", loaded.state, new, result=json.dumps({"ops": ops}),
                        arg=f"{len(pending)} episodes", model="rules", key_id=key_id)
            ev["ops"] = ops
            v = await self.docs.commit(name, loaded.version, new, [ev], lease_token=token,
                                       consume_evidence=sorted(pending))
            for op in ops:
                metrics.CONSOLIDATION_OPS.labels(name, op["op"]).inc()
            self._gauge(name, new)
            return {"version": v, "ops": ops, "evidence": len(pending)}
        finally:
            await self.docs.release(name, token)

    async def set_controls(self, name: str, body, tenant: str = "default", key_id: str | None = None) -> dict:
        await self._meta(name, tenant)
        token = await self._locked(name)
        try:
            loaded = await self.docs.load(name)
            s = copy.deepcopy(loaded.state)
            c = s["controls"]
            if body.disabled_verbs is not None:
                c["disabled_verbs"] = sorted(set(body.disabled_verbs))
            if body.harness_cap is not None:
                c["harness_cap"] = body.harness_cap
            if body.clear_harness_cap:
                c["harness_cap"] = None
            for eid, flag in [(i, True) for i in body.pin_entries or []] + [(i, False) for i in body.unpin_entries or []]:
                if eid not in s["entries"]:
                    raise ApiError(404, "Entry not found", f"bank {name!r} has no entry {eid!r}")
                s["entries"][eid]["pinned"] = flag
            ev = make_event(loaded.version + 1, "control", loaded.state, s, result="controls changed",
                        arg=body.model_dump_json(exclude_none=True), key_id=key_id)
            v = await self.docs.commit(name, loaded.version, s, [ev], lease_token=token)
            return {"version": v, "controls": c}
        finally:
            await self.docs.release(name, token)

    async def audit(self, name: str, after: int, limit: int, tenant: str = "default") -> dict:
        await self._meta(name, tenant)
        return await audit_log.page(self.docs, name, after, limit)
