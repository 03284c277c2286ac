"""A whole session through the HTTP API with the real vLLM engine (tiny random-weight Qwen3)."""

import json

import jsonpatch

from service.api.schemas import StepOut

ROOM = ["go to desk 1", "go to drawer 1", "open drawer 1", "take pen 1 from desk 1", "inventory", "look"]
TASK = "Your task is to: put a pen in drawer."


def observation(i):
    return f"You arrive at desk {i % 3 + 1}. On the desk {i % 3 + 1}, you see a pen {i % 2 + 1}, and a book 1."


async def test_twenty_steps_end_to_end(app_factory):
    async with app_factory(harness_cap=2) as c:
        r = await c.post("/v1/sessions", json={"task": TASK, "domain": "alfworld", "mode": "inline"})
        assert r.status_code == 201
        sid, version = r.json()["session_id"], r.json()["version"]
        assert version == 0
        n_turns = 0
        for i in range(20):
            r = await c.post(f"/v1/sessions/{sid}/step",
                             json={"observation": observation(i), "admissible_actions": ROOM})
            assert r.status_code == 200, r.text
            body = r.json()
            # the step writes its body itself: the same bytes as FastAPI's StepOut serialization of it
            assert r.headers["content-type"] == "application/json"
            assert r.content == StepOut.model_validate(body).model_dump_json().encode()
            assert body["action"] in ROOM
            assert body["turns"][-1]["kind"] == "env" and body["turns"][-1]["arg"] == body["action"]
            assert all(t["kind"] == "harness" for t in body["turns"][:-1]) and len(body["turns"]) <= 3
            assert body["version"] == version + 1 + len(body["turns"])   # one observe event + one per turn
            u = body["usage"]
            assert u["harness_calls"] == len(body["turns"]) - 1
            assert u["prompt_tokens"] > 0 and u["completion_tokens"] > 0
            assert 0 < u["model_seconds"] <= u["total_seconds"]
            version = body["version"]
            n_turns += len(body["turns"])
        r = await c.post(f"/v1/sessions/{sid}/end", json={"won": True})
        assert r.status_code == 200 and r.json()["version"] == version + 1

        # the audit has one event per version, and its patches rebuild every version
        events, after = [], 0
        while True:
            page = (await c.get(f"/v1/sessions/{sid}/audit", params={"after": after, "limit": 17})).json()
            events += page["events"]
            if page["next"] is None:
                break
            after = page["next"]
        assert [e["version"] for e in events] == list(range(1, version + 2))
        assert sum(e["kind"] in ("harness", "env") for e in events) == n_turns
        assert sum(e["kind"] == "observe" for e in events) == 20
        for e in events:
            if e["kind"] in ("harness", "env"):
                assert e["model"] and e["usage"]["prompt_tokens"] > 0 and len(e["prompt_hash"]) == 16
        doc = (await c.get(f"/v1/sessions/{sid}/state", params={"version": 0})).json()["state"]
        for e in events:
            doc = jsonpatch.apply_patch(doc, e["patch"])
            served = (await c.get(f"/v1/sessions/{sid}/state", params={"version": e["version"]})).json()
            assert served["state"] == doc, f"version {e['version']}"
        current = (await c.get(f"/v1/sessions/{sid}/state")).json()
        assert current["version"] == version + 1 and current["state"] == doc
        assert doc["status"] == "ended" and doc["budget"]["env_steps"] == 20

        # diff between two versions is the patch that turns one into the other
        d = (await c.get(f"/v1/sessions/{sid}/diff", params={"from": 3, "to": 30})).json()
        s3 = (await c.get(f"/v1/sessions/{sid}/state", params={"version": 3})).json()["state"]
        s30 = (await c.get(f"/v1/sessions/{sid}/state", params={"version": 30})).json()["state"]
        assert jsonpatch.apply_patch(s3, d["patch"]) == s30

        # NDJSON export carries the same events
        r = await c.get(f"/v1/sessions/{sid}/audit", params={"limit": 1000},
                        headers={"Accept": "application/x-ndjson"})
        assert r.headers["content-type"].startswith("application/x-ndjson")
        assert [json.loads(line) for line in r.text.splitlines()] == events

        # the finished episode reached the bank as evidence, and consolidation audits itself
        bank = (await c.get("/v1/banks/default")).json()
        assert bank["pending_evidence"] == 1
        r = await c.post("/v1/banks/default/consolidate")
        assert r.status_code == 200 and r.json()["evidence"] == 1
        audit = (await c.get("/v1/banks/default/audit")).json()["events"]
        assert audit[-1]["kind"] == "consolidate" and audit[-1]["version"] == r.json()["version"]
        assert (await c.get("/v1/banks/default")).json()["pending_evidence"] == 0

        r = await c.post(f"/v1/sessions/{sid}/step", json={"observation": "x", "admissible_actions": ROOM})
        assert r.status_code == 409
        assert (await c.delete(f"/v1/sessions/{sid}")).status_code == 204
        assert (await c.get(f"/v1/sessions/{sid}/state")).status_code == 404


async def test_done_observation_is_recorded_without_an_action(app_factory):
    async with app_factory() as c:
        sid = (await c.post("/v1/sessions", json={"task": TASK, "domain": "alfworld"})).json()["session_id"]
        r = await c.post(f"/v1/sessions/{sid}/step", json={"observation": "You won!", "won": True, "done": True})
        assert r.status_code == 200
        assert r.json()["action"] is None and r.json()["turns"] == [] and r.json()["version"] == 1
        state = (await c.get(f"/v1/sessions/{sid}/state")).json()["state"]
        assert state["done"] and state["won"]
