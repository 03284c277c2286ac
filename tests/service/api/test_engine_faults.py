"""Engine failure and timeout: 503 / 504 problem+json, nothing written (state, audit, idempotency record), the
session's lease released; a client that goes away mid-step (its request task cancelled) leaves nothing either.
The real vLLM engine, wrapped to fail, hang or wait on a gate (failure injection)."""

from __future__ import annotations

import asyncio

from service.policy.engines.base import EngineError, GenerationRequest
from service.policy.grammar import escape
from service.policy.wire import ACTION_CLOSE, ACTION_OPEN, THINK_CLOSE, THINK_OPEN

ADM = ["go to desk 1", "look"]
STEP = {"observation": "You see a desk 1.", "admissible_actions": ADM}


class Faulty:
    """The real engine; `mode` = "ok" | "fail" | "hang" | "gate" | "fail_second" (a harness turn first, then fail)."""

    def __init__(self, engine):
        self.engine, self.model_id, self.mode, self.calls = engine, engine.model_id, "ok", 0
        self.gate, self.entered = asyncio.Event(), asyncio.Event()

    async def start(self): ...
    async def close(self): ...
    async def ready(self): return await self.engine.ready()

    async def generate(self, req: GenerationRequest):
        self.calls += 1
        if self.mode == "fail":
            raise EngineError("injected failure")
        if self.mode == "hang":
            await asyncio.sleep(3600)
        if self.mode == "gate":
            self.entered.set()
            await self.gate.wait()
        if self.mode == "fail_second":
            if self.calls > 1:
                raise EngineError("injected failure on the second turn")
            only = escape(THINK_OPEN + THINK_CLOSE + ACTION_OPEN) + "track \\[desk 1\\]" + escape(ACTION_CLOSE)
            req = GenerationRequest(**{**req.__dict__, "regex": only})
        return await self.engine.generate(req)


async def _snapshot(c, sid):
    state = (await c.get(f"/v1/sessions/{sid}/state")).json()
    audit = (await c.get(f"/v1/sessions/{sid}/audit")).json()
    return state, audit


async def _problem(r, status):
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert "nothing was written" in r.json()["detail"]


async def test_engine_failure_is_503_and_writes_nothing(app_factory, vllm_engine):
    eng = Faulty(vllm_engine)
    async with app_factory(engine=eng) as c:
        sid = (await c.post("/v1/sessions", json={"task": "t", "harness_cap": 2})).json()["session_id"]
        before = await _snapshot(c, sid)
        for mode in ("fail", "fail_second"):
            eng.mode, eng.calls = mode, 0
            r = await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers={"Idempotency-Key": "k1"})
            await _problem(r, 503)
            assert await _snapshot(c, sid) == before         # not even the observe or the first harness turn
        eng.mode = "ok"                                       # the retry with the same key really runs now
        r = await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers={"Idempotency-Key": "k1"})
        assert r.status_code == 200, r.text
        events = (await c.get(f"/v1/sessions/{sid}/audit")).json()["events"]
        assert sum(e["kind"] == "observe" for e in events) == 1


async def test_engine_timeout_is_504_and_writes_nothing(app_factory, vllm_engine):
    eng = Faulty(vllm_engine)
    # the stub hangs without a deadline of its own, so the whole-step deadline is what answers: short here
    async with app_factory(engine=eng, engine_timeout_s=0.2, step_timeout_s=0.5) as c:
        sid = (await c.post("/v1/sessions", json={"task": "t", "harness_cap": 0})).json()["session_id"]
        before = await _snapshot(c, sid)
        eng.mode = "hang"
        r = await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers={"Idempotency-Key": "k1"})
        await _problem(r, 504)
        assert await _snapshot(c, sid) == before
        eng.mode = "ok"                                       # lease released: the next step is not 409
        r = await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers={"Idempotency-Key": "k1"})
        assert r.status_code == 200, r.text


async def test_client_gone_mid_step_leaves_nothing(app_factory, vllm_engine):
    eng = Faulty(vllm_engine)
    async with app_factory(engine=eng) as c:
        sid = (await c.post("/v1/sessions", json={"task": "t", "harness_cap": 0})).json()["session_id"]
        before = await _snapshot(c, sid)
        eng.mode = "gate"
        task = asyncio.create_task(c.post(f"/v1/sessions/{sid}/step", json=STEP, headers={"Idempotency-Key": "k"}))
        await asyncio.wait_for(eng.entered.wait(), 30)       # the model is generating ...
        task.cancel()                                         # ... and the client is gone
        try:
            await task
        except asyncio.CancelledError:
            pass
        await asyncio.sleep(0.2)
        assert await _snapshot(c, sid) == before
        eng.mode = "ok"
        r = await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers={"Idempotency-Key": "k"})
        assert r.status_code == 200, r.text                   # not 409: the lease went with the request
        events = (await c.get(f"/v1/sessions/{sid}/audit")).json()["events"]
        assert sum(e["kind"] == "observe" for e in events) == 1
