"""Experience-bank use-cases: read, buffer evidence, consolidate (evolver), controls and pins."""

from __future__ import annotations

import copy
import json
from contextlib import asynccontextmanager
from pathlib import Path

from service import audit as audit_log
from service import metrics
from service.audit import make_event
from service.bank.evolver import CATEGORIES, consolidate, new_bank
from service.bank.model_evolver import consolidate_with_model
from service.policy.engines.base import Engine
from service.problems import ApiError
from service.store.docs import DocGone, DocStore


def bank_doc(tenant: str, name: str) -> str:
    """The document id of a tenant's bank: names are per tenant ("default" of two tenants are two banks). Neither
    part can contain "/" (service.auth.TENANT_PATTERN, schemas.NAME_PATTERN), so ids never collide."""
    return f"{tenant}/{name}"


_CACHE_BANKS = 256  # parsed bank states kept per process (by version), most recently loaded last


class BankSeedError(ValueError):
    """The configured bank seed file is missing or is not an evolver state (the service refuses to start)."""


def load_bank_seed(path: str | Path) -> dict:
    """A bank.json (what the evolver writes: entries, caps, controls, counters) as a new bank's starting state."""
    try:
        state = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise BankSeedError(f"bank seed {path}: {e}") from None
    base = new_bank()
    if not isinstance(state, dict) or not isinstance(state.get("entries"), dict) or any(
            not isinstance(e, dict) or e.get("category") not in CATEGORIES or not isinstance(e.get("text"), str)
            for e in state["entries"].values()):
        raise BankSeedError(f"bank seed {path}: not an Experience bank (entries of the evolver's categories "
                            f"{', '.join(CATEGORIES)}, each with a text)")
    return {**base, **{k: state[k] for k in base if k in state}}


def seed_path(setting: str | None, model_dir: str) -> Path | None:
    """The bank seed a service uses: the setting's file, none for 'none', else the policy folder's bank.json."""
    if setting is not None:
        return None if setting.strip().lower() in ("", "none") else Path(setting)
    shipped = Path(model_dir) / "bank.json"
    return shipped if shipped.is_file() else None


class BankService:
    def __init__(self, docs: DocStore, cap: int = 80, lease_ms: int = 3_000, engine: Engine | None = None,
                 heartbeat_ms: int | None = None, seed: dict | None = None, evolver_chars: int | None = None):
        # the bank's single-writer lease, renewed every heartbeat_ms (None: lease_ms / 3) while a change runs
        self.docs, self.cap, self.lease_ms, self.engine = docs, cap, lease_ms, engine
        self.heartbeat_ms = heartbeat_ms
        self.seed = seed   # what a new bank starts with (load_bank_seed), None: empty
        self.evolver_chars = evolver_chars   # the model evolver's prompt bound (the engine's context is finite)
        self._cache: dict[str, tuple[tuple, dict]] = {}  # doc id -> ((version, created_at), state)

    def initial(self) -> dict:
        """A new bank's state: the seed's entries and counters (a copy) under this service's cap, or empty."""
        if self.seed is None:
            return new_bank(self.cap)
        return {**copy.deepcopy(self.seed), "caps": {c: self.cap for c in CATEGORIES}}

    async def ensure(self, name: str, tenant: str = "default") -> None:
        doc = bank_doc(tenant, name)
        if not await self.docs.exists(doc):
            await self.docs.create(doc, self.initial(), {"tenant": tenant})

    def meta_key(self, name: str, tenant: str = "default") -> str:
        """The Redis key whose version/created_at `read(..., seen=...)` takes (see DocStore.begin's `peek`)."""
        return self.docs.meta_key(bank_doc(tenant, name))

    async def read(self, name: str, tenant: str = "default", seen: list | None = None) -> dict:
        """The bank state sessions read at each step (empty bank if it was never created).

        `seen`: [version, created_at] of the bank's meta, read by the caller in this request (DocStore.begin
        with `peek=meta_key(...)`). The parsed state of that version is reused from the cache when it is there,
        saving the load. The returned state is shared: read it, never change it."""
        doc = bank_doc(tenant, name)
        if seen is not None:
            if seen[0] is None:
                return self.initial()
            hit = self._cache.get(doc)
            if hit is not None and hit[0] == (seen[0], seen[1]):
                return hit[1]
        try:
            loaded = await self.docs.load(doc)
        except DocGone:
            return self.initial()
        self._cache.pop(doc, None)
        if len(self._cache) >= _CACHE_BANKS:
            self._cache.pop(next(iter(self._cache)))
        self._cache[doc] = ((loaded.meta["version"], loaded.meta.get("created_at")), loaded.state)
        return loaded.state

    async def _meta(self, name: str, tenant: str) -> dict:
        doc = bank_doc(tenant, name)
        try:
            meta = await self.docs.meta(doc)
        except DocGone:
            raise ApiError(404, "Bank not found", f"no bank {name!r}") from None
        if meta.get("tenant", "default") != tenant:
            raise ApiError(404, "Bank not found", f"no bank {name!r}")
        return meta

    async def show(self, name: str, tenant: str = "default") -> dict:
        doc = bank_doc(tenant, name)
        await self._meta(name, tenant)
        loaded = await self.docs.load(doc)
        pending = await self.docs.evidence(doc)
        self._gauge(name, loaded.state)
        return {"name": name, "version": loaded.version, "pending_evidence": len(pending), **loaded.state}

    async def add_evidence(self, name: str, session_id: str, evidence: dict, tenant: str = "default") -> bool:
        doc = bank_doc(tenant, name)
        await self.ensure(name, tenant)
        return await self.docs.add_evidence(doc, session_id, {"session_id": session_id, **evidence})

    def _gauge(self, name: str, state: dict) -> None:
        for c in CATEGORIES:
            n = sum(e["category"] == c for e in state["entries"].values())
            metrics.BANK_ENTRIES.labels(name, c).set(n)
            metrics.BANK_CAP.labels(name, c).set(state["caps"][c])

    @asynccontextmanager
    async def _lease(self, name: str, tenant: str):
        """The bank's single-writer lease with its current state (one Redis call), given back after the block."""
        async with self.docs.lease(bank_doc(tenant, name), self.lease_ms, heartbeat_ms=self.heartbeat_ms) as held:
            if held.status == "gone" or held.meta.get("tenant", "default") != tenant:
                raise ApiError(404, "Bank not found", f"no bank {name!r}")
            if held.status == "busy":
                raise ApiError(409, "Bank busy", f"bank {name!r} is being changed by another request")
            yield held.loaded, held.token

    async def consolidate(self, name: str, tenant: str = "default", key_id: str | None = None,
                          evolver: str = "rules") -> dict:
        """Run an evolver over the pending evidence: "rules" (deterministic) or "model" (the served model)."""
        doc = bank_doc(tenant, name)
        async with self._lease(name, tenant) as (loaded, token):
            pending = await self.docs.evidence(doc)
            if not pending:
                return {"version": loaded.version, "ops": [], "evidence": 0}
            stamp = loaded.version + 1
            extra = {}
            if evolver == "model":
                new, ops, info = await consolidate_with_model(self.engine, loaded.state, list(pending.values()), stamp,
                                                              max_chars=self.evolver_chars)
                model, usage = info["model"], info["usage"]
                extra = {"rejected": info["rejected"], "raw": info["raw"], "error": info["error"]}
            else:
                new, ops = consolidate(loaded.state, list(pending.values()), stamp)
                model, usage = "rules", None
            ev = make_event(stamp, "consolidate", loaded.state, new, result=json.dumps({"ops": ops}),
                            arg=f"{len(pending)} episodes", model=model, usage=usage, key_id=key_id,
                            evolver=evolver, **extra)
            ev["ops"] = ops
            v = await self.docs.commit(doc, loaded.version, new, [ev], lease_token=token,
                                       consume_evidence=sorted(pending))
            for op in ops:
                metrics.CONSOLIDATION_OPS.labels(name, op["op"]).inc()
            self._gauge(name, new)
            return {"version": v, "ops": ops, "evidence": len(pending), "evolver": evolver,
                    **({"rejected": extra["rejected"]} if extra else {})}

    async def set_controls(self, name: str, body, tenant: str = "default", key_id: str | None = None) -> dict:
        doc = bank_doc(tenant, name)
        async with self._lease(name, tenant) as (loaded, token):
            s = copy.deepcopy(loaded.state)
            c = s["controls"]
            if body.disabled_verbs is not None:
                c["disabled_verbs"] = sorted(set(body.disabled_verbs))
            if body.harness_cap is not None:
                c["harness_cap"] = body.harness_cap
            if body.clear_harness_cap:
                c["harness_cap"] = None
            for eid, flag in ([(i, True) for i in body.pin_entries or []]
                              + [(i, False) for i in body.unpin_entries or []]):
                if eid not in s["entries"]:
                    raise ApiError(404, "Entry not found", f"bank {name!r} has no entry {eid!r}")
                s["entries"][eid]["pinned"] = flag
            ev = make_event(loaded.version + 1, "control", loaded.state, s, result="controls changed",
                        arg=body.model_dump_json(exclude_none=True), key_id=key_id)
            v = await self.docs.commit(doc, loaded.version, s, [ev], lease_token=token)
            return {"version": v, "controls": c}

    async def audit(self, name: str, after: int, limit: int, tenant: str = "default") -> dict:
        doc = bank_doc(tenant, name)
        await self._meta(name, tenant)
        return await audit_log.page(self.docs, doc, after, limit)
