"""The per-process bank cache: a step reads its bank's version with the lease (one Redis call) and reuses the
parsed bank only while that version holds. Bookkeeping only, so the zero-cost ScriptedEngine drives the steps."""

from service.api.app import create_app
from service.policy.engines.scripted import ScriptedEngine
from tests.support import Client, make_settings

ADM = ["go to desk 1", "look"]
LOOK = "<think>t</think><action>look</action>"


def verbs_in(regex: str) -> set[str]:
    return {v for v in ("track", "commit", "recall", "note") if f"{v} \\[" in regex}


async def test_steps_reuse_the_bank_until_it_changes(redis_url):
    eng = ScriptedEngine([LOOK])
    app = create_app(make_settings(redis_url, engine="scripted"), engine=eng)
    async with Client(app) as c:
        banks = app.state.banks
        loads = []
        real_load = banks.docs.load

        async def counting_load(doc):
            loads.append(doc)
            return await real_load(doc)

        banks.docs.load = counting_load
        sid = (await c.post("/v1/sessions", json={"task": "t", "bank": "cached"})).json()["session_id"]
        step = {"observation": "o", "admissible_actions": ADM}
        for _ in range(3):
            assert (await c.post(f"/v1/sessions/{sid}/step", json=step)).status_code == 200
        assert len(loads) == 1                                     # first step loads, the next two hit the cache
        assert "track" in verbs_in(eng.requests[-1].regex)

        # the bank changes: the next step sees its new version at once
        assert (await c.patch("/v1/banks/cached/controls", json={"disabled_verbs": ["track"]})).status_code == 200
        assert (await c.post(f"/v1/sessions/{sid}/step", json=step)).status_code == 200
        assert "track" not in verbs_in(eng.requests[-1].regex)
        assert (await c.post(f"/v1/sessions/{sid}/step", json=step)).status_code == 200
        # one load more: the step after the change (the controls change read the bank with its lease, no load)
        assert len(loads) == 2 and "track" not in verbs_in(eng.requests[-1].regex)

        # a second session on the same bank shares the cached state; a session on another tenant's bank or a
        # bank never created reads an empty bank
        sid2 = (await c.post("/v1/sessions", json={"task": "t", "bank": "cached"})).json()["session_id"]
        for _ in range(2):
            assert (await c.post(f"/v1/sessions/{sid2}/step", json=step)).status_code == 200
            assert "track" not in verbs_in(eng.requests[-1].regex)
        assert len(loads) == 3

        # a done step reads no bank
        assert (await c.post(f"/v1/sessions/{sid}/step", json={"observation": "end", "done": True})).status_code == 200
        assert len(loads) == 3
