"""The whole-step deadline (`step_timeout_s`): a step whose turns take longer answers 504, writes nothing and gives
the lease back, so the retry with the same Idempotency-Key runs. A step longer than its (short) lease commits: the
heartbeat renews the lease, and a request arriving meanwhile gets 409 saying when the lease would lapse. Only the
timing matters here, so a ScriptedEngine made slow on demand stands in for the model."""

from __future__ import annotations

import asyncio
import time

import pytest

from service.api.app import create_app
from service.policy.engines.scripted import ScriptedEngine
from tests.support import Client, make_settings

STEP = {"observation": "You see a desk 1.", "admissible_actions": ["go to desk 1", "look"]}


class Slow(ScriptedEngine):
    def __init__(self):
        super().__init__(["<think>t</think><action>look</action>"])
        self.delay_s = 0.0
        self.stall_s = 0.0      # blocks the event loop: the replica stalls, its heartbeat too

    async def generate(self, req):
        await asyncio.sleep(self.delay_s)
        time.sleep(self.stall_s)  # noqa: ASYNC251
        return await super().generate(req)


async def test_a_step_over_its_deadline_is_504_and_writes_nothing(redis_url):
    eng = Slow()
    app = create_app(make_settings(redis_url, engine="scripted", step_timeout_s=0.3), engine=eng)
    async with Client(app) as c:
        docs = app.state.sessions.docs
        sid = (await c.post("/v1/sessions", json={"task": "t", "harness_cap": 0})).json()["session_id"]
        eng.delay_s = 5.0
        r = await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers={"Idempotency-Key": "k"})
        assert r.status_code == 504 and "step took over" in r.json()["detail"], r.text
        loaded = await docs.load(sid)
        assert loaded.version == 0 and await docs.r.xlen(docs.key(sid, "events")) == 0
        assert await docs.r.get(docs.key(sid, "lock")) is None and await docs.r.get(docs.key(sid, "idem:k")) is None
        eng.delay_s = 0.0
        r = await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers={"Idempotency-Key": "k"})
        assert r.status_code == 200 and r.json()["action"] == "look", r.text


async def test_a_step_longer_than_its_lease_commits_and_a_concurrent_one_is_told_when_to_retry(redis_url):
    eng = Slow()
    app = create_app(make_settings(redis_url, engine="scripted", step_lease_ms=300, lease_heartbeat_ms=100,
                                   step_timeout_s=10), engine=eng)
    async with Client(app) as c:
        docs = app.state.sessions.docs
        sid = (await c.post("/v1/sessions", json={"task": "t", "harness_cap": 0})).json()["session_id"]
        eng.delay_s = 1.2                                     # four leases
        slow = asyncio.create_task(c.post(f"/v1/sessions/{sid}/step", json=STEP, headers={"Idempotency-Key": "a"}))
        await asyncio.sleep(0.8)
        r = await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers={"Idempotency-Key": "b"})
        assert r.status_code == 409 and r.json()["title"] == "Step in progress", r.text
        assert 0 < r.json()["retry_after"] <= 0.3 and r.headers["retry-after"] == "1" and r.json()["version"] == 0
        r = await slow
        assert r.status_code == 200 and r.json()["version"] == 2, r.text
        assert (await docs.load(sid)).version == 2 and await docs.r.get(docs.key(sid, "lock")) is None


async def test_a_step_that_stalls_past_its_lease_is_fenced_off_and_its_retry_runs(redis_url):
    eng = Slow()
    app = create_app(make_settings(redis_url, engine="scripted", step_lease_ms=300, lease_heartbeat_ms=100),
                     engine=eng)
    async with Client(app) as c:
        docs = app.state.sessions.docs
        sid = (await c.post("/v1/sessions", json={"task": "t", "harness_cap": 0})).json()["session_id"]
        eng.stall_s = 0.6
        r = await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers={"Idempotency-Key": "k"})
        assert r.status_code == 409 and r.json()["title"] == "Lease lost" and r.json()["version"] == 0, r.text
        assert (await docs.load(sid)).version == 0 and await docs.r.xlen(docs.key(sid, "events")) == 0
        assert await docs.r.get(docs.key(sid, "idem:k")) is None
        eng.stall_s = 0.0
        r = await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers={"Idempotency-Key": "k"})
        assert r.status_code == 200 and r.json()["version"] == 2, r.text


async def test_the_client_retries_a_step_fenced_off_for_a_lost_lease_and_it_runs_once(redis_url):
    """What a product agent sees when a replica stalls past the lease (seen under CPU overload): the SDK gets the 409
    "Lease lost", retries with the same Idempotency-Key, and the step runs once; other 409s are still raised."""
    import httpx

    from service.client import AsyncEvoHarnessClient, Conflict, RetryPolicy

    eng = Slow()
    app = create_app(make_settings(redis_url, engine="scripted", step_lease_ms=300, lease_heartbeat_ms=100),
                     engine=eng)
    tries = []

    class Once(httpx.ASGITransport):
        async def handle_async_request(self, request):
            resp = await super().handle_async_request(request)
            if request.url.path.endswith("/step"):
                tries.append((request.headers["Idempotency-Key"], resp.status_code))
                eng.stall_s = 0.0                              # only the first try stalls
            return resp

    retry = RetryPolicy(attempts=3, backoff_s=0.01)
    async with Client(app), AsyncEvoHarnessClient("http://evoharness", transport=Once(app=app), retry=retry) as evo:
        sid = (await evo.create_session("t", harness_cap=0)).session_id
        eng.stall_s = 0.6
        step = await evo.step(sid, STEP["observation"], STEP["admissible_actions"])
        assert step.action == "look" and step.version == 2
        assert [code for _, code in tries] == [409, 200] and tries[0][0] == tries[1][0]
        events = await evo.audit_all(sid)
        assert [e["kind"] for e in events].count("observe") == 1 and events[-1]["version"] == 2
        with pytest.raises(Conflict):                       # the session moved on: not retried
            await evo.step(sid, STEP["observation"], STEP["admissible_actions"], if_match=0)
        assert len(tries) == 3
