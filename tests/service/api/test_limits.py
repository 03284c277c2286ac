"""One test per limit, each with its 4xx problem+json naming the limit, and nothing written: body size (by
Content-Length and chunked), observation size, admissible-action count and length, task length, step budget asked
for, harness-call cap (asked for, and enforced per step with a real engine steered to call verbs), and the per-key
rate limit kept in Redis (429 + Retry-After, shared by replicas, per key, window expiry)."""

from __future__ import annotations

import asyncio

from service.policy.engines.base import GenerationRequest
from service.policy.grammar import escape
from service.policy.wire import ACTION_CLOSE, ACTION_OPEN, THINK_CLOSE, THINK_OPEN
from tests.service.api.keys import auth_settings, bearer

ADM = ["go to desk 1", "look"]


def _problem(r, status: int, *needles: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    p = r.json()
    assert p["status"] == status and p["title"] and p["detail"]
    text = str(p)
    assert all(n in text for n in needles), (needles, p)
    return p


async def _unchanged(c, sid, before):
    assert (await c.get(f"/v1/sessions/{sid}/state")).json() == before


async def _session(c, **body) -> tuple[str, dict]:
    r = await c.post("/v1/sessions", json={"task": "put a pen in drawer", **body})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    return sid, (await c.get(f"/v1/sessions/{sid}/state")).json()


async def test_body_size_by_content_length_and_chunked(app_factory):
    async with app_factory(max_body_bytes=1000) as c:
        sid, before = await _session(c)
        _problem(await c.post(f"/v1/sessions/{sid}/step", json={"observation": "o" * 2000}), 413, "limit 1000")

        async def chunks():                               # no Content-Length: Transfer-Encoding: chunked
            yield b'{"observation": "'
            for _ in range(20):
                yield b"o" * 100
            yield b'"}'

        r = await c.post(f"/v1/sessions/{sid}/step", content=chunks(), headers={"Content-Type": "application/json"})
        _problem(r, 413, "passed 1000 bytes")

        async def small():
            yield b'{"observation": "You see a desk 1.", "admissible_actions": ["look"]}'

        await _unchanged(c, sid, before)
        r = await c.post(f"/v1/sessions/{sid}/step", content=small(), headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text                # a small chunked body goes through


async def test_observation_size(app_factory):
    async with app_factory(max_observation_chars=100) as c:
        sid, before = await _session(c)
        r = await c.post(f"/v1/sessions/{sid}/step", json={"observation": "o" * 101, "admissible_actions": ADM})
        _problem(r, 413, "limit 100")
        await _unchanged(c, sid, before)


async def test_admissible_action_count_and_length(app_factory):
    async with app_factory(max_admissible=3, max_action_chars=20) as c:
        sid, before = await _session(c)
        r = await c.post(f"/v1/sessions/{sid}/step",
                         json={"observation": "o", "admissible_actions": ["a", "b", "c", "d"]})
        _problem(r, 422, "limit 3", "admissible_actions")
        r = await c.post(f"/v1/sessions/{sid}/step", json={"observation": "o", "admissible_actions": ["x" * 21]})
        _problem(r, 422, "admissible_actions.0", "1-20")
        await _unchanged(c, sid, before)


async def test_task_length_and_step_budget(app_factory):
    async with app_factory(max_task_chars=50, max_steps_limit=100) as c:
        _problem(await c.post("/v1/sessions", json={"task": "t" * 51}), 422, "limit 50", "task")
        _problem(await c.post("/v1/sessions", json={"task": "t", "max_steps": 101}), 422, "max_steps")
        assert (await c.post("/v1/sessions", json={"task": "t" * 50, "max_steps": 100})).status_code == 201


async def test_harness_cap_asked_for_is_bounded(app_factory):
    async with app_factory() as c:
        _problem(await c.post("/v1/sessions", json={"task": "t", "harness_cap": 65}), 422, "harness_cap")
        sid, before = await _session(c)
        r = await c.patch(f"/v1/sessions/{sid}/controls", json={"harness_cap": 65})
        _problem(r, 422, "harness_cap")
        await _unchanged(c, sid, before)


class VerbHungry:
    """The real engine, steered: whenever the grammar allows `track`, the output is constrained to a track call."""

    def __init__(self, engine):
        self.engine, self.model_id, self.calls = engine, engine.model_id, 0

    async def start(self): ...
    async def close(self): ...
    async def ready(self): return await self.engine.ready()

    async def generate(self, req: GenerationRequest):
        self.calls += 1
        if req.regex and "track \\[" in req.regex:
            only = escape(THINK_OPEN + THINK_CLOSE + ACTION_OPEN) + "track \\[desk 1\\]" + escape(ACTION_CLOSE)
            req = GenerationRequest(**{**req.__dict__, "regex": only})
        return await self.engine.generate(req)


async def test_per_step_harness_call_cap_is_enforced(app_factory, vllm_engine):
    hungry = VerbHungry(vllm_engine)
    async with app_factory(engine=hungry) as c:
        sid, _ = await _session(c, harness_cap=2)
        r = await c.post(f"/v1/sessions/{sid}/step",
                         json={"observation": "You see a desk 1.", "admissible_actions": ADM})
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["usage"]["harness_calls"] == 2 and [t["kind"] for t in out["turns"]] == ["harness", "harness", "env"]
        assert out["action"] in ADM and hungry.calls == 3


async def test_rate_limit_per_key_shared_by_replicas(app_factory, redis_url):
    from service.api.app import create_app
    from tests.support import Client, make_settings

    settings = auth_settings(rate_limit=4, rate_window_s=30)
    async with app_factory(**settings) as c:
        ns = c._transport.app.state.settings.namespace
        replica = Client(create_app(make_settings(redis_url, namespace=ns, **settings),
                                    engine=c._transport.app.state.sessions.engine))
        async with replica as c2:
            auditor = bearer("acme", "auditor")
            codes = [(await cl.get("/v1/banks/default", headers=auditor)).status_code for cl in (c, c2, c, c2)]
            assert codes == [404] * 4                      # four requests counted, over two replicas
            r = await c2.get("/v1/banks/default", headers=auditor)
            p = _problem(r, 429, "acme-auditor")
            assert 1 <= int(r.headers["retry-after"]) <= 30 and p["retry_after"] == int(r.headers["retry-after"])
            _problem(await c.get("/v1/banks/default", headers=auditor), 429)
            # another key of the same tenant has its own budget; a refused request wrote nothing
            other = await c.post("/v1/sessions", json={"task": "t"}, headers=bearer("acme", "agent"))
            assert other.status_code == 201


async def test_rate_limit_window_expires(app_factory):
    async with app_factory(**auth_settings(rate_limit=2, rate_window_s=1)) as c:
        h = bearer("zeta", "auditor")
        # no bank yet: 404, counted all the same
        assert [(await c.get("/v1/banks/default", headers=h)).status_code for _ in range(3)] == [404, 404, 429]
        assert (await c.get("/metrics", headers=bearer("zeta", "ops"))).status_code == 200   # scrapes: never counted
        await asyncio.sleep(1.2)
        assert (await c.get("/v1/banks/default", headers=h)).status_code == 404
