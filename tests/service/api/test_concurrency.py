"""Concurrent steps on one session, and idempotent retries (real Redis, real vLLM)."""

import asyncio

from service import metrics

ADM = ["go to desk 1", "open drawer 1", "look"]


async def turns_count():
    """Turns the service has counted. A step records its metrics on the event loop's next turn, after its
    response (service/sessions.py): yield once so the steps answered so far are all counted."""
    await asyncio.sleep(0)
    return sum(metrics.TURNS.labels(k)._value.get() for k in ("harness", "env"))


async def test_twenty_concurrent_steps_one_applies_per_version(app_factory):
    async with app_factory(harness_cap=1) as c:
        sid = (await c.post("/v1/sessions", json={"task": "open the drawer"})).json()["session_id"]

        async def one(i):
            return await c.post(f"/v1/sessions/{sid}/step", headers={"If-Match": "0"},
                                json={"observation": f"obs {i}", "admissible_actions": ADM})

        rs = await asyncio.gather(*(one(i) for i in range(20)))
        codes = sorted(r.status_code for r in rs)
        assert codes.count(200) == 1 and codes.count(409) == 19, codes
        winner = next(r for r in rs if r.status_code == 200).json()
        for r in rs:
            if r.status_code == 409:
                p = r.json()
                assert r.headers["content-type"] == "application/problem+json"
                assert p["status"] == 409 and p["version"] in (0, winner["version"])
        audit = (await c.get(f"/v1/sessions/{sid}/audit")).json()["events"]
        assert [e["version"] for e in audit] == list(range(1, winner["version"] + 1))
        assert sum(e["kind"] == "observe" for e in audit) == 1

        # without If-Match, concurrent steps serialise: each applies on its own version or gets 409
        rs = await asyncio.gather(*(c.post(f"/v1/sessions/{sid}/step",
                                           json={"observation": f"o{i}", "admissible_actions": ADM})
                                    for i in range(5)))
        ok = [r.json() for r in rs if r.status_code == 200]
        assert ok and all(r.status_code in (200, 409) for r in rs)
        audit = (await c.get(f"/v1/sessions/{sid}/audit", params={"limit": 1000})).json()["events"]
        assert sum(e["kind"] == "observe" for e in audit) == 1 + len(ok)


async def test_idempotent_retries_return_the_stored_response(app_factory):
    async with app_factory() as c:
        sid = (await c.post("/v1/sessions", json={"task": "open the drawer"})).json()["session_id"]
        body = {"observation": "You see a drawer 1.", "admissible_actions": ADM}
        first = await c.post(f"/v1/sessions/{sid}/step", json=body, headers={"Idempotency-Key": "step-1"})
        assert first.status_code == 200
        before = await turns_count()
        retries = await asyncio.gather(*(c.post(f"/v1/sessions/{sid}/step", json=body,
                                                headers={"Idempotency-Key": "step-1"}) for _ in range(5)))
        assert all(r.status_code == 200 and r.content == first.content for r in retries)
        assert await turns_count() == before                      # the model was not called again
        state = (await c.get(f"/v1/sessions/{sid}/state")).json()
        assert state["version"] == first.json()["version"]  # nothing applied twice

        # a concurrent burst with one fresh key: exactly one applies, every 200 carries the same body
        rs = await asyncio.gather(*(c.post(f"/v1/sessions/{sid}/step", json={**body, "observation": "next"},
                                           headers={"Idempotency-Key": "step-2"}) for _ in range(6)))
        oks = [r for r in rs if r.status_code == 200]
        assert oks and all(r.status_code in (200, 409) for r in rs)
        assert len({r.content for r in oks}) == 1
        audit = (await c.get(f"/v1/sessions/{sid}/audit", params={"limit": 1000})).json()["events"]
        assert sum(e["kind"] == "observe" for e in audit) == 2

        # the same key with another body is refused, not replayed
        r = await c.post(f"/v1/sessions/{sid}/step", json={**body, "observation": "other"},
                         headers={"Idempotency-Key": "step-1"})
        assert r.status_code == 422 and "Idempotency-Key" in r.json()["title"]


def _urgent_admissions() -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("evoharness_admission_wait_seconds_count", {"klass": "urgent"}) or 0.0


async def test_a_full_replica_answers_503_and_writes_nothing_and_a_refused_session_goes_first(app_factory):
    # one step at a time, and a line nobody may wait in: the others are refused, not half-applied
    async with app_factory(max_running_steps=1, admission_timeout_s=0.001) as c:
        sids = [(await c.post("/v1/sessions", json={"task": "open the drawer"})).json()["session_id"]
                for _ in range(6)]
        rs = await asyncio.gather(*(c.post(f"/v1/sessions/{sid}/step", json={"observation": "o", "admissible_actions":
                                                                              ADM}) for sid in sids))
        codes = [r.status_code for r in rs]
        assert 200 in codes and 503 in codes, codes
        for sid, r in zip(sids, rs):
            state = (await c.get(f"/v1/sessions/{sid}/state")).json()
            if r.status_code == 503:
                p = r.json()
                assert p["title"] == "Overloaded" and "nothing was written" in p["detail"]
                assert r.headers["Retry-After"] == "1" and state["version"] == 0
                assert (await c.get(f"/v1/sessions/{sid}/audit")).json()["events"] == []
            else:
                assert state["version"] == r.json()["version"] > 0

    # a session this replica refused 409 busy runs its next step ahead of the line
    async with app_factory(harness_cap=0) as c:
        sid = (await c.post("/v1/sessions", json={"task": "open the drawer"})).json()["session_id"]
        before = _urgent_admissions()
        rs = await asyncio.gather(*(c.post(f"/v1/sessions/{sid}/step", json={"observation": f"o{i}",
                                                                              "admissible_actions": ADM})
                                    for i in range(4)))
        refused = sum(r.status_code == 409 for r in rs)
        assert refused >= 1
        assert _urgent_admissions() == before              # a refusal takes no slot
        r = await c.post(f"/v1/sessions/{sid}/step", json={"observation": "again", "admissible_actions": ADM})
        assert r.status_code == 200 and _urgent_admissions() == before + 1
        r = await c.post(f"/v1/sessions/{sid}/step", json={"observation": "later", "admissible_actions": ADM})
        assert r.status_code == 200 and _urgent_admissions() == before + 1   # once per refusal
