"""The step route counts a request against its key's rate limit in the same Redis call that takes the session's
lease (one round trip fewer per step). A refused step answers the same 429 as any route, takes no lease and
writes nothing; requests refused before that call (401, 403, 422, 413) are not counted. Bookkeeping only, so the
zero-cost ScriptedEngine drives the steps; every check reads the real Redis the tests start."""

from __future__ import annotations

from service.api.app import create_app
from service.policy.engines.scripted import ScriptedEngine
from tests.service.api.keys import auth_settings, bearer
from tests.support import Client, make_settings

STEP = {"observation": "You see a desk 1.", "admissible_actions": ["go to desk 1", "look"]}
LOOK = "<think>t</think><action>look</action>"


def _app(redis_url, limit: int):
    eng = ScriptedEngine([LOOK])
    return create_app(make_settings(redis_url, engine="scripted", **auth_settings(rate_limit=limit,
                                                                                  rate_window_s=30)),
                      engine=eng), eng


async def _stored(docs, sid: str) -> tuple:
    """Everything a step writes: state + version, audit stream, lease, the idempotency record of key `k`."""
    loaded = await docs.load(sid)
    return (loaded.version, loaded.state, await docs.r.xlen(docs.key(sid, "events")),
            await docs.r.get(docs.key(sid, "lock")), await docs.r.get(docs.key(sid, "idem:k")))


def _is_429(r, key_id: str) -> int:
    assert r.status_code == 429, r.text
    assert r.headers["content-type"] == "application/problem+json"
    p = r.json()
    assert p["title"] == "Too many requests" and key_id in p["detail"]
    assert 1 <= int(r.headers["retry-after"]) <= 30 and p["retry_after"] == int(r.headers["retry-after"])
    return p["retry_after"]


async def test_a_rate_limited_step_writes_nothing_and_holds_no_lease(redis_url):
    app, eng = _app(redis_url, limit=3)
    agent = bearer("acme", "agent")
    async with Client(app) as c:
        docs = app.state.sessions.docs
        sid = (await c.post("/v1/sessions", json={"task": "t"}, headers=agent)).json()["session_id"]   # 1
        assert (await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers=agent)).status_code == 200  # 2
        h = {**agent, "Idempotency-Key": "k"}
        first = await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers={**agent, "Idempotency-Key": "j"})
        assert first.status_code == 200                                                                  # 3
        before, calls = await _stored(docs, sid), len(eng.requests)
        assert before[3] is None and before[4] is None

        _is_429(await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers=h), "acme-agent")
        # a replay of a stored step is counted (and refused) before the idempotency record is read
        _is_429(await c.post(f"/v1/sessions/{sid}/step", json=STEP,
                             headers={**agent, "Idempotency-Key": "j"}), "acme-agent")
        _is_429(await c.post("/v1/sessions/nope/step", json=STEP, headers=agent), "acme-agent")
        assert await _stored(docs, sid) == before and len(eng.requests) == calls

        # steps and the other routes share one budget per key; another key of the tenant has its own
        _is_429(await c.get(f"/v1/sessions/{sid}/state", headers=agent), "acme-agent")
        r = await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers=bearer("acme", "admin"))
        assert r.status_code == 200 and r.json()["version"] > before[0]


async def test_step_requests_refused_before_the_count_are_not_counted(redis_url):
    app, _ = _app(redis_url, limit=2)
    agent, auditor = bearer("acme", "agent"), bearer("acme", "auditor")
    async with Client(app) as c:
        sid = (await c.post("/v1/sessions", json={"task": "t"}, headers=agent)).json()["session_id"]   # 1
        url = f"/v1/sessions/{sid}/step"
        for _ in range(3):
            assert (await c.post(url, json=STEP)).status_code == 401
            assert (await c.post(url, json=STEP, headers=auditor)).status_code == 403   # auditor: not counted
            assert (await c.post(url, json={"observation": 5}, headers=agent)).status_code == 422
            assert (await c.post(url, json={**STEP, "admissible_actions": []}, headers=agent)).status_code == 422
            assert (await c.post(url, json={**STEP, "observation": "o" * 10**6}, headers=agent)).status_code == 413
            assert (await c.post(url, json=STEP, headers={**agent, "If-Match": "x"})).status_code == 400
        assert (await c.post(url, json=STEP, headers=agent)).status_code == 200                           # 2
        _is_429(await c.post(url, json=STEP, headers=agent), "acme-agent")                                # 3
        # 403, then 429 once over the limit, is the order of the other routes (counted in the auth dependency)
        assert (await c.get(f"/v1/sessions/{sid}/state", headers=auditor)).status_code == 200             # 1
        assert (await c.get(f"/v1/sessions/{sid}/audit", headers=auditor)).status_code == 200             # 2
        _is_429(await c.get(f"/v1/sessions/{sid}/state", headers=auditor), "acme-auditor")
        # over the limit, a step answers 403 for a key that may not step (the role check comes first)
        assert (await c.post(url, json=STEP, headers=auditor)).status_code == 403
