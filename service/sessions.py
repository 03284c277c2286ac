"""Session use-cases: create, step, end, controls, time travel. Routes stay thin and call these."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import jsonpatch

from service import audit as audit_log
from service import metrics
from service.admission import Admission, AdmissionTimeout, RecentlyBusy
from service.audit import make_event, patch
from service.bank.evidence import evidence_of
from service.banks import BankService
from service.domains import get_domain
from service.harness import new_state, observe
from service.harness.ops import HarnessError
from service.policy.engines.base import Engine, EngineTimeout
from service.policy.grammar import is_safe_action
from service.policy.render import transcript_chars_for
from service.policy.turns import PolicyOutputError, Sampling, Turn, run_step
from service.problems import ApiError, rate_limited, version_conflict
from service.rate_limit import RateLimiter
from service.settings import Settings, model_context_len
from service.store import codec
from service.store.docs import DocGone, DocStore, Lease, Loaded, VersionConflict

log = logging.getLogger("evoharness")


def not_found(session_id: str) -> ApiError:
    return ApiError(404, "Session not found", f"no session {session_id!r}")


def in_progress(held: Lease, detail: str) -> ApiError:
    """409 while another request holds the session's lease. `retry_after` (seconds; `Retry-After` rounds it up) is
    when that lease lapses unless its holder renews it: a holder that died frees the session by then."""
    retry_after = round(held.busy_ms / 1000, 3)
    return ApiError(409, "Step in progress", f"{detail}; its lease runs {retry_after:g} s more unless renewed",
                    headers={"Retry-After": str(math.ceil(retry_after))}, version=int(held.meta["version"]),
                    retry_after=retry_after)


@dataclass(frozen=True, slots=True)
class StepCall:
    """One step request: what its policy part and its commit part both read."""

    sid: str
    body: Any                # service.api.schemas.StepIn
    tenant: str
    key_id: str | None
    idem_key: str | None
    req_hash: str | None     # sha256 of the body, for an idempotent step only
    if_match: int | None
    t0: float                # time.perf_counter() when the request reached the service


@dataclass(frozen=True, slots=True)
class Decided:
    """What the policy part hands the commit part: the state to commit, its events, the turns and the action."""

    final: dict
    events: list[dict]
    turns: list[Turn]
    action: str | None
    model_s: float


_BANK_OF_MAX = 50_000  # sessions whose bank (fixed at creation) this process remembers


class SessionService:
    def __init__(self, settings: Settings, docs: DocStore, banks: BankService, engine: Engine,
                 limiter: RateLimiter | None = None):
        self.settings, self.docs, self.banks, self.engine = settings, docs, banks, engine
        # counts each step that reaches Redis against its key's rate limit (step(key_id=...)); None: no limit
        self.limiter = limiter
        # the episode chat must fit the engine's context (service.policy.render)
        self.transcript_chars = transcript_chars_for(settings.max_model_len or model_context_len(settings.model))
        # session id -> (tenant, bank name): a step reads its bank's version in the same Redis call that takes
        # the lease (DocStore.begin peek), and BankService reuses the parsed bank while that version holds
        self._bank_of: dict[str, tuple[str, str]] = {}
        # at most max_running_steps steps run the policy at once; a session refused 409 busy here goes first
        self.admission = Admission(settings.max_running_steps)
        self._busy = RecentlyBusy()

    # ---- create -------------------------------------------------------------------
    async def create(self, body, tenant: str = "default", key_id: str | None = None) -> dict:
        s = self.settings
        if len(body.task) > s.max_task_chars:
            raise ApiError(422, "Task too long", f"task has {len(body.task)} characters; limit {s.max_task_chars}",
                           errors=[{"field": "task", "message": f"at most {s.max_task_chars} characters"}])
        if body.max_steps is not None and body.max_steps > s.max_steps_limit:
            raise ApiError(422, "Invalid request", f"max_steps above the limit {s.max_steps_limit}",
                           errors=[{"field": "max_steps", "message": f"at most {s.max_steps_limit}"}])
        try:
            domain = get_domain(body.domain)
        except KeyError as e:
            raise ApiError(422, "Unknown domain", str(e.args[0]),
                           errors=[{"field": "domain", "message": str(e.args[0])}]) from None
        state = new_state(
            task=body.task, domain=body.domain, mode=body.mode, bank=body.bank,
            initial_belief=domain.initial_belief(body.task),
            modules=body.modules, harness_cap=s.harness_cap if body.harness_cap is None else body.harness_cap,
            max_steps=body.max_steps, metadata=body.metadata, transcript_chars=self.transcript_chars,
        )
        state["belief"]["task_type"] = domain.task_type(body.task)
        await self.banks.ensure(body.bank, tenant)
        sid = uuid.uuid4().hex
        meta = {"tenant": tenant, "bank": body.bank, "domain": body.domain, "mode": body.mode,
                "created_by": key_id or ""}
        await self.docs.create(sid, state, meta, ttl=s.session_ttl_s)
        await self.docs.set_live(sid, time.time() + s.session_ttl_s)
        metrics.SESSIONS_CREATED.inc()
        return {"session_id": sid, "version": 0}

    async def _meta(self, sid: str, tenant: str) -> dict:
        try:
            meta = await self.docs.meta(sid)
        except DocGone:
            raise not_found(sid) from None
        if meta.get("tenant", "default") != tenant:
            raise not_found(sid)
        return meta

    # ---- step ---------------------------------------------------------------------
    def _check_step(self, body) -> None:
        s = self.settings
        if len(body.observation) > s.max_observation_chars:
            raise ApiError(413, "Observation too large",
                           f"observation has {len(body.observation)} characters; limit {s.max_observation_chars}")
        adm = body.admissible_actions
        if adm is not None:
            if not adm and not body.done:
                raise ApiError(422, "Invalid request", "admissible_actions is empty",
                               errors=[{"field": "admissible_actions", "message": "give at least one action or null"}])
            if len(adm) > s.max_admissible:
                raise ApiError(422, "Too many admissible actions", f"{len(adm)} actions; limit {s.max_admissible}",
                               errors=[{"field": "admissible_actions", "message": f"at most {s.max_admissible}"}])
            for i, a in enumerate(adm):
                if not is_safe_action(a) or len(a) > s.max_action_chars:
                    raise ApiError(422, "Invalid admissible action",
                                   f"admissible_actions[{i}] must be 1-{s.max_action_chars} printable ASCII characters "
                                   "without '<' or '>'",
                                   errors=[{"field": f"admissible_actions.{i}", "message": "not a valid action"}])

    async def step(self, sid: str, body, *, idem_key: str | None, if_match: int | None,
                   tenant: str = "default", key_id: str | None = None) -> dict:
        t0 = time.perf_counter()
        self._check_step(body)
        # only an idempotent step stores or compares the request's hash
        req_hash = hashlib.sha256(body.model_dump_json().encode()).hexdigest() if idem_key else None
        call = StepCall(sid, body, tenant, key_id, idem_key, req_hash, if_match, t0)
        bank_of = self._bank_of.get(sid)
        peek = self.banks.meta_key(bank_of[1], bank_of[0]) if bank_of is not None and not body.done else None
        async with self.docs.lease(sid, self.settings.step_lease_ms, idem_key, peek=peek,
                                   count=await self._count(key_id),
                                   heartbeat_ms=self.settings.lease_heartbeat_ms) as held:
            if held.status == "limited":
                raise rate_limited(key_id, self.limiter.verdict(*held.limited), self.limiter.window_s)
            if held.status == "gone" or held.meta.get("tenant", "default") != tenant:
                raise not_found(sid)
            if held.status == "replay":
                return self._check_replay(held.stored, req_hash)
            if held.status == "busy":
                metrics.STEPS.labels("conflict").inc()
                self._busy.mark(sid)
                raise in_progress(held, "another step of this session is running")
            if held.loaded.took_over:          # its last step died with its replica: this is that step's retry
                metrics.LEASE_TAKEOVERS.inc()
            try:
                # a step retried after its replica died goes ahead of new ones (a 409 before, or a lease taken over)
                urgent = self._busy.pop(sid) or held.loaded.took_over
                async with self.admission.slot(urgent, self.settings.admission_timeout_s):
                    decided = await self._run_policy(call, held.loaded)
            except AdmissionTimeout as e:
                metrics.STEPS.labels("overloaded").inc()
                raise ApiError(503, "Overloaded", f"{e}; nothing was written", headers={"Retry-After": "1"},
                               retry_after=1) from None
            return await self._commit_step(call, held, decided)

    async def _count(self, key_id: str | None) -> tuple[str, int, int] | None:
        """The rate-limit counter for `begin` to count this step in its own Lua call (no extra round trip);
        on Redis Cluster (counter and session in different slots) the step is counted here first (429)."""
        if self.limiter is None or key_id is None:
            return None
        if self.docs.can_peek:
            return self.limiter.key(key_id), self.limiter.limit, self.limiter.window_ms
        verdict = await self.limiter.hit(key_id)
        if not verdict.allowed:
            raise rate_limited(key_id, verdict, self.limiter.window_s)
        return None

    def _check_replay(self, stored: dict, req_hash: str | None) -> dict:
        if stored["request_hash"] != req_hash:
            raise ApiError(422, "Idempotency-Key reused",
                           "this Idempotency-Key was used with a different request body")
        metrics.STEPS.labels("replay").inc()
        return stored["body"]

    async def _run_policy(self, call: StepCall, loaded: Loaded) -> Decided:
        """The step's policy part, under the session's lease: observe, then the policy's turns (harness calls and the
        environment action). Writes nothing."""
        v0, state, body = loaded.version, loaded.state, call.body
        if call.if_match is not None and call.if_match != v0:
            metrics.STEPS.labels("conflict").inc()
            raise ApiError(409, "Version mismatch", f"If-Match {call.if_match} but the session is at version {v0}",
                           version=v0)
        if state["status"] != "active":
            raise ApiError(409, "Session is over", f"session is {state['status']}", version=v0)
        if state["done"]:
            raise ApiError(409, "Episode is done", "the episode was reported done; end the session", version=v0)
        domain = get_domain(state["domain"])
        observed = observe(state, domain, body.observation, body.admissible_actions, body.won, body.done)
        common = {"key_id": call.key_id}
        events = [make_event(v0 + 1, "observe", state, observed, result=body.observation[:200], **common)]
        if body.done:
            return Decided(observed, events, [], None, 0.0)
        seen = loaded.peek if self._bank_of.get(call.sid) == (call.tenant, state["bank"]) else None
        bank = await self.banks.read(state["bank"], call.tenant, seen=seen)
        if seen is None and self.docs.can_peek:
            self._remember_bank(call.sid, call.tenant, state["bank"])
        sampling = Sampling(self.settings.temperature, self.settings.top_p, self.settings.seed,
                            experience_k=self.settings.recall_k)
        try:
            # a deadline on this task, not asyncio.wait_for: on Python 3.11 that runs the step in a new task
            async with asyncio.timeout(self.settings.step_timeout_s):
                outcome = await run_step(observed, domain, self.engine, bank_entries=bank["entries"],
                                         bank_controls=bank["controls"], sampling=sampling,
                                         affinity_key=f"{call.tenant}/{call.sid}")
        except TimeoutError:
            raise EngineTimeout(f"step took over {self.settings.step_timeout_s:.0f} s") from None
        except HarnessError as e:
            raise ApiError(409, "Step not allowed", str(e), version=v0) from None
        except PolicyOutputError as e:
            metrics.INVALID_OUTPUTS.inc()
            raise ApiError(502, "Invalid policy output", str(e)) from None
        if outcome.invalid_outputs:
            metrics.INVALID_OUTPUTS.inc(outcome.invalid_outputs)
        prev, model_s = observed, 0.0
        for t in outcome.turns:
            usage = {"prompt_tokens": t.prompt_tokens, "completion_tokens": t.completion_tokens,
                     "seconds": round(t.seconds, 6)}
            events.append(make_event(v0 + 1 + len(events), t.kind, prev, t.state, verb=t.verb, arg=t.arg,
                                     reason=t.reason, result=t.result, usage=usage, model=t.model,
                                     prompt_hash=t.prompt_hash, **common))
            prev = t.state
            model_s += t.seconds
        return Decided(outcome.state, events, outcome.turns, outcome.action, model_s)

    async def _commit_step(self, call: StepCall, held: Lease, decided: Decided) -> dict:
        """The step's commit part: the response, then the new state, its events and the idempotent record in one
        script that also gives the lease back."""
        v0, turns, final, model_s = held.loaded.version, decided.turns, decided.final, decided.model_s
        body_out = {
            "action": decided.action,
            "turns": [t.public() for t in turns],
            "version": v0 + len(decided.events),
            "usage": {
                "prompt_tokens": sum(t.prompt_tokens for t in turns),
                "completion_tokens": sum(t.completion_tokens for t in turns),
                "harness_calls": sum(t.kind == "harness" for t in turns),
                "model_seconds": round(model_s, 6),
                "total_seconds": round(time.perf_counter() - call.t0, 6),
            },
        }
        idem_value = json.dumps({"request_hash": call.req_hash, "body": body_out}) if call.idem_key else None
        ts = time.perf_counter()
        state_json = codec.dumps(final)  # bytes: valid JSON by construction, not parsed again by the commit script
        try:
            await self.docs.commit(call.sid, v0, state_json, decided.events, lease_token=held.token,
                                   idem_key=call.idem_key, idem_value=idem_value,
                                   idem_ttl=self.settings.idempotency_ttl_s, ttl=self.settings.session_ttl_s,
                                   release=True)
        except VersionConflict as e:
            metrics.STEPS.labels("conflict").inc()
            if e.why == "lease":
                log.warning("session %s: step fenced off, it outlived its %d ms lease (this replica stalled or lost "
                            "Redis); nothing written", call.sid, self.settings.step_lease_ms)
            raise version_conflict(e.current, e.why) from None
        except DocGone:
            raise not_found(call.sid) from None
        held.released()
        store_s = time.perf_counter() - ts
        # Prometheus bookkeeping runs on the event loop's next turn, after this response is written: off the
        # caller's latency, and done before the loop reads another request (a scrape included)
        asyncio.get_running_loop().call_soon(self._observe_metrics, turns, final, model_s, store_s,
                                             time.perf_counter() - call.t0, len(state_json))
        return body_out

    def _remember_bank(self, sid: str, tenant: str, bank: str) -> None:
        if len(self._bank_of) >= _BANK_OF_MAX:
            self._bank_of.pop(next(iter(self._bank_of)))
        self._bank_of[sid] = (tenant, bank)

    def _observe_metrics(self, turns, final, model_s, store_s, total_s, state_bytes) -> None:
        child = metrics.child
        child(metrics.STEPS, "ok").inc()
        n_harness = 0
        bucket = metrics.position_bucket(final["budget"]["env_steps"])
        for t in turns:
            child(metrics.TURNS, t.kind).inc()
            purpose = "harness" if t.kind == "harness" else "env"
            child(metrics.TOKENS, "prompt", purpose).inc(t.prompt_tokens)
            child(metrics.TOKENS, "completion", purpose).inc(t.completion_tokens)
            if t.kind == "harness":
                n_harness += 1
                outcome = "empty" if (t.result or "").startswith(("no belief", "no experience")) else "ok"
                child(metrics.HARNESS_CALLS, t.verb, outcome).inc()
                child(metrics.HARNESS_CALL_SECONDS, t.verb).observe(t.seconds)
                child(metrics.HARNESS_BY_POSITION, bucket, t.verb).inc()
        if turns:
            metrics.HARNESS_PER_STEP.observe(n_harness)
        child(metrics.STEP_SECONDS, "model").observe(model_s)
        child(metrics.STEP_SECONDS, "store").observe(store_s)
        child(metrics.STEP_SECONDS, "total").observe(total_s)
        metrics.STATE_BYTES.observe(state_bytes)

    # ---- end / delete --------------------------------------------------------------
    @asynccontextmanager
    async def _lease(self, sid: str, tenant: str):
        """The session's single-writer lease with its current state (one Redis call), given back after the block."""
        async with self.docs.lease(sid, self.settings.step_lease_ms,
                                   heartbeat_ms=self.settings.lease_heartbeat_ms) as held:
            if held.status == "gone" or held.meta.get("tenant", "default") != tenant:
                raise not_found(sid)
            if held.status == "busy":
                raise in_progress(held, "another request holds this session")
            yield held.loaded, held.token

    async def end(self, sid: str, won: bool, tenant: str = "default", key_id: str | None = None) -> dict:
        async with self._lease(sid, tenant) as (loaded, token):
            state = loaded.state
            if state["status"] == "ended":
                return {"version": loaded.version, "status": "ended", "won": state["won"]}
            await self.banks.add_evidence(state["bank"], sid, evidence_of(state, won), tenant)
            ended = {**state, "status": "ended", "won": won}
            ev = make_event(loaded.version + 1, "end", state, ended, result="won" if won else "lost", key_id=key_id)
            v = await self.docs.commit(sid, loaded.version, ended, [ev], lease_token=token,
                                       ttl=self.settings.session_ttl_s)
            await self.docs.drop_live(sid)
            return {"version": v, "status": "ended", "won": won}

    async def delete(self, sid: str, tenant: str = "default") -> None:
        await self._meta(sid, tenant)
        self._bank_of.pop(sid, None)
        await self.docs.delete(sid)
        await self.docs.drop_live(sid)

    async def active_count(self) -> int:
        return await self.docs.count_live()

    # ---- read side -----------------------------------------------------------------
    async def state(self, sid: str, version: int | None, tenant: str = "default") -> dict:
        meta = await self._meta(sid, tenant)
        current = int(meta["version"])
        if version is None:
            loaded = await self.docs.load(sid)
            return {"session_id": sid, "version": loaded.version, "state": loaded.state}
        if version < 0 or version > current:
            raise ApiError(404, "Version not found", f"version {version} does not exist (current {current})",
                           version=current)
        return {"session_id": sid, "version": version, "state": await self.state_at(sid, version)}

    async def state_at(self, sid: str, version: int) -> dict:
        doc = await self.docs.init_state(sid)
        after = 0
        while after < version:
            evs = await self.docs.events(sid, after=after, limit=500, upto=version)
            if not evs:
                break
            for ev in evs:
                doc = jsonpatch.apply_patch(doc, ev["patch"])
            after = evs[-1]["version"]
        return doc

    async def audit(self, sid: str, after: int, limit: int, tenant: str = "default") -> dict:
        await self._meta(sid, tenant)
        return await audit_log.page(self.docs, sid, after, limit)

    async def diff(self, sid: str, a: int, b: int, tenant: str = "default") -> dict:
        meta = await self._meta(sid, tenant)
        current = int(meta["version"])
        for name, v in (("from", a), ("to", b)):
            if v < 0 or v > current:
                raise ApiError(404, "Version not found", f"{name}={v} does not exist (current {current})",
                               version=current)
        return {"from": a, "to": b, "patch": patch(await self.state_at(sid, a), await self.state_at(sid, b))}

    # ---- operator controls ---------------------------------------------------------
    async def set_controls(self, sid: str, body, tenant: str = "default", key_id: str | None = None) -> dict:
        async with self._lease(sid, tenant) as (loaded, token):
            s = json.loads(json.dumps(loaded.state))
            c = s["controls"]
            if body.disabled_verbs is not None:
                c["disabled_verbs"] = sorted(set(body.disabled_verbs))
            if body.harness_cap is not None:
                c["harness_cap"] = body.harness_cap
            for name, fact in (body.pin_beliefs or {}).items():
                c["pinned_beliefs"][name] = fact
                s["belief"].setdefault("entities", {})[name] = fact
            for name in body.unpin_beliefs or []:
                c["pinned_beliefs"].pop(name, None)
            ev = make_event(loaded.version + 1, "control", loaded.state, s, result="controls changed",
                        arg=body.model_dump_json(exclude_none=True), key_id=key_id)
            v = await self.docs.commit(sid, loaded.version, s, [ev], lease_token=token,
                                       ttl=self.settings.session_ttl_s)
            return {"version": v, "controls": c}

