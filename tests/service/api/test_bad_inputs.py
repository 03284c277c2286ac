"""Every bad input gets its 4xx with a problem+json body naming what was wrong; nothing is written."""

import pytest

GOOD_STEP = {"observation": "You see a desk 1.", "admissible_actions": ["go to desk 1"]}

CASES = [
    # (method, path, json, headers, status, field or title fragment)
    ("post", "/v1/sessions", {}, {}, 422, "task"),
    ("post", "/v1/sessions", {"task": ""}, {}, 422, "task"),
    ("post", "/v1/sessions", {"task": "t", "mode": "sometimes"}, {}, 422, "mode"),
    ("post", "/v1/sessions", {"task": "t", "domain": "chess"}, {}, 422, "domain"),
    ("post", "/v1/sessions", {"task": "t", "bank": "no spaces!"}, {}, 422, "bank"),
    ("post", "/v1/sessions", {"task": "t", "max_steps": 0}, {}, 422, "max_steps"),
    ("post", "/v1/sessions", {"task": "t", "modules": {"memory": True}}, {}, 422, "modules"),
    ("post", "/v1/sessions", {"task": "t", "surprise": 1}, {}, 422, "surprise"),
    ("post", "/v1/sessions", {"task": "x" * 5000}, {}, 422, "task"),
    ("post", "{sid}/step", {}, {}, 422, "observation"),
    ("post", "{sid}/step", {"observation": 5}, {}, 422, "observation"),
    ("post", "{sid}/step", {"observation": "o", "admissible_actions": []}, {}, 422, "admissible_actions"),
    ("post", "{sid}/step", {"observation": "o", "admissible_actions": ["a<b>"]}, {}, 422, "admissible_actions.0"),
    ("post", "{sid}/step", {"observation": "o", "admissible_actions": ["line\nbreak"]}, {}, 422,
     "admissible_actions.0"),
    ("post", "{sid}/step", {"observation": "o", "admissible_actions": ["a"] * 600}, {}, 422, "admissible_actions"),
    ("post", "{sid}/step", {"observation": "o" * 20000}, {}, 413, "Observation too large"),
    ("post", "{sid}/step", GOOD_STEP, {"If-Match": "abc"}, 400, "If-Match"),
    ("post", "{sid}/step", GOOD_STEP, {"If-Match": "7"}, 409, "Version mismatch"),
    ("post", "{sid}/step", GOOD_STEP, {"Idempotency-Key": "k" * 200}, 400, "Idempotency-Key"),
    ("post", "/v1/sessions/nope/step", GOOD_STEP, {}, 404, "Session not found"),
    ("get", "{sid}/state?version=99", None, {}, 404, "Version not found"),
    ("get", "{sid}/state?version=-1", None, {}, 422, "version"),
    ("get", "{sid}/diff?from=0", None, {}, 422, "to"),
    ("get", "{sid}/diff?from=0&to=50", None, {}, 404, "Version not found"),
    ("get", "{sid}/audit?limit=0", None, {}, 422, "limit"),
    ("post", "{sid}/end", {"won": "maybe"}, {}, 422, "won"),
    ("patch", "{sid}/controls", {"disabled_verbs": ["fly"]}, {}, 422, "disabled_verbs.0"),
    ("patch", "{sid}/controls", {"harness_cap": -1}, {}, 422, "harness_cap"),
    ("get", "/v1/banks/never-made", None, {}, 404, "Bank not found"),
    ("patch", "/v1/banks/default/controls", {"pin_entries": ["e999"]}, {}, 404, "Entry not found"),
    ("delete", "/v1/sessions/nope", None, {}, 404, "Session not found"),
]


@pytest.mark.parametrize("method,path,body,headers,status,what", CASES)
async def test_bad_input(app_factory, method, path, body, headers, status, what):
    async with app_factory() as c:
        sid = (await c.post("/v1/sessions", json={"task": "put a pen in drawer"})).json()["session_id"]
        base = f"/v1/sessions/{sid}"
        url = path.replace("{sid}", base)
        before = (await c.get(f"{base}/state")).json()
        kw = {"headers": headers}
        if body is not None:
            kw["json"] = body
        r = await c.request(method.upper(), url, **kw)
        assert r.status_code == status, r.text
        assert r.headers["content-type"] == "application/problem+json"
        p = r.json()
        assert p["status"] == status and p["title"] and p["detail"]
        named = [e["field"] for e in p.get("errors", [])]
        assert what in named or what in p["title"] or what in p["detail"], p
        after = (await c.get(f"{base}/state")).json()
        assert after == before                       # nothing written


async def test_oversized_body_is_refused_before_reading(app_factory):
    async with app_factory(max_body_bytes=1000) as c:
        sid = (await c.post("/v1/sessions", json={"task": "t"})).json()["session_id"]
        r = await c.post(f"/v1/sessions/{sid}/step", json={"observation": "o" * 2000})
        assert r.status_code == 413 and "limit 1000" in r.json()["detail"]
