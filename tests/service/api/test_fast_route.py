"""The step route's fast path (service/api/fast_route.py) answers exactly what FastAPI's own handler answers.

Two sessions get the same sequence of step requests, one through the fast path (`Content-Type: application/json`)
and one through FastAPI's handler (the same requests with the fast path switched off); every answer must match:
status, problem details, and the step's body (its wall-clock seconds aside). The bodies cover what a
client can get wrong (types, missing and extra fields, broken JSON, empty body, JSON that json.loads and pydantic's
JSON parser might read differently: duplicate keys, NaN, escapes, lone surrogates) and what it can get right.
The ScriptedEngine drives the steps; the service, its auth and Redis are real."""

from __future__ import annotations

import pytest

import service.api.fast_route as fast_route
from service.api.app import create_app
from service.api.schemas import StepIn
from service.policy.engines.scripted import ScriptedEngine
from tests.service.api.keys import auth_settings, bearer
from tests.support import Client, make_settings

LOOK = "<think>t</think><action>look</action>"
OK = '{"observation": "You see a desk 1.", "admissible_actions": ["go to desk 1", "look"]}'
BODIES = [
    OK,
    '{"observation": "caf\\u00e9 \u4e2d", "admissible_actions": ["look"], "won": false, "done": null}',
    '{"observation": "a", "observation": "dup", "admissible_actions": ["look"]}',       # duplicate key
    '{"observation": "x\\ud800y", "admissible_actions": ["look"]}',                      # lone surrogate escape
    '{"observation": "ok", "won": 0}',                                                   # lax bool
    '{"observation": "ok", "won": "yes"}',
    '{"observation": "ok", "won": NaN}',
    '{"observation": "ok", "won": 2}',
    '{"observation": 5}',
    '{"observation": "ok", "admissible_actions": "look"}',
    '{"observation": "ok", "admissible_actions": ["look", 3]}',
    '{"observation": "ok", "extra": 1}',
    '{"admissible_actions": ["look"]}',
    '["observation"]',
    'null',
    '{"observation": "ok"',                                                             # broken JSON
    '{"observation": "ok"} trailing',
    '',
    '{"observation": "' + "x" * 70_000 + '"}',                                           # over the observation cap
    OK,
]


def _comparable(r) -> tuple:
    body = r.json() if r.content else None
    if isinstance(body, dict) and isinstance(body.get("usage"), dict):
        body["usage"].pop("total_seconds", None), body["usage"].pop("model_seconds", None)
    return r.status_code, r.headers.get("content-type"), body


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8"])
async def test_fast_path_answers_what_fastapis_handler_answers(redis_url, monkeypatch, content_type):
    app = create_app(make_settings(redis_url, engine="scripted", **auth_settings()),
                     engine=ScriptedEngine([LOOK]))
    agent = {**bearer("acme", "agent"), "content-type": content_type}
    parsed = []
    real = StepIn.model_validate_json.__func__

    def counting(cls, data, *a, **kw):
        parsed.append(data)
        return real(cls, data, *a, **kw)

    monkeypatch.setattr(StepIn, "model_validate_json", classmethod(counting))
    async with Client(app) as c:
        fast_sid, slow_sid = [(await c.post("/v1/sessions", json={"task": "put a mug on the desk"},
                                            headers=bearer("acme", "agent"))).json()["session_id"] for _ in range(2)]
        statuses = []
        for body in BODIES:
            monkeypatch.setattr(fast_route, "is_json", lambda ct: False)           # FastAPI's handler
            slow = await c.post(f"/v1/sessions/{slow_sid}/step", content=body.encode("utf-8", "surrogatepass"),
                                headers=agent)
            monkeypatch.undo()
            monkeypatch.setattr(StepIn, "model_validate_json", classmethod(counting))
            n = len(parsed)
            fast = await c.post(f"/v1/sessions/{fast_sid}/step", content=body.encode("utf-8", "surrogatepass"),
                                headers=agent)
            assert len(parsed) == n + 1, "the fast path did not see this request"
            assert _comparable(fast) == _comparable(slow), body[:80]
            statuses.append(fast.status_code)
        # what each request must get: 200 for valid ones, else 422 (413 for the oversized observation)
        assert statuses == [200, 200, 200, 422, 200, 200, 422, 422, 422, 422, 422, 422, 422, 422, 422, 422, 422,
                            422, 413, 200]
        # both sessions hold the same history: the same versions, the same audit verbs and results
        a, b = [(await c.get(f"/v1/sessions/{s}/audit", headers=bearer("acme", "admin"))).json()["events"]
                for s in (fast_sid, slow_sid)]
        assert [(e["version"], e["kind"], e["result"]) for e in a] == [(e["version"], e["kind"], e["result"])
                                                                       for e in b]
        assert len(a) > 2 * 4                                  # several steps were taken, not only refused


async def test_auth_errors_come_before_the_body_on_the_fast_path(redis_url):
    app = create_app(make_settings(redis_url, engine="scripted", **auth_settings()),
                     engine=ScriptedEngine([LOOK]))
    async with Client(app) as c:
        sid = (await c.post("/v1/sessions", json={"task": "t"}, headers=bearer("acme", "agent"))).json()["session_id"]
        url = f"/v1/sessions/{sid}/step"
        r = await c.post(url, content=b"{broken", headers={"content-type": "application/json"})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        r = await c.post(url, content=b"{broken", headers={**bearer("acme", "auditor"),
                                                           "content-type": "application/json"})
        assert r.status_code == 403
        r = await c.post(url, content=b"{broken", headers={**bearer("acme", "agent"),
                                                           "content-type": "application/json"})
        assert r.status_code == 422


@pytest.mark.parametrize("ct,expected", [("application/json", True), ("Application/JSON ; charset=utf-8", True),
                                         ("application/problem+json", False), ("text/plain", False),
                                         (None, False), ("application/jsonx", False)])
def test_only_plain_json_takes_the_fast_path(ct, expected):
    assert fast_route.is_json(ct) is expected
