"""Operator control surface: pins, disabled verbs and caps, per session and per bank, all audited."""

from service.policy.engines.base import GenerationRequest

ADM = ["go to desk 1", "take pen 1 from desk 1", "look"]


class Recording:
    """Wraps the real engine and keeps each request (to see which verbs the grammar allowed)."""

    def __init__(self, engine):
        self.engine, self.requests = engine, []
        self.model_id = engine.model_id

    async def start(self): ...
    async def close(self): ...
    async def ready(self): return await self.engine.ready()

    async def generate(self, req: GenerationRequest):
        self.requests.append(req)
        return await self.engine.generate(req)


def verbs_in(regex: str) -> set[str]:
    return {v for v in ("track", "commit", "recall", "note") if f"{v} \\[" in regex}


async def test_session_controls_disable_verbs_cap_and_pin(app_factory, vllm_engine):
    rec = Recording(vllm_engine)
    async with app_factory(engine=rec) as c:
        created = await c.post("/v1/sessions", json={"task": "put a pen in drawer", "domain": "alfworld"})
        sid = created.json()["session_id"]
        base = f"/v1/sessions/{sid}"
        await c.post(f"{base}/step", json={"observation": "You see a desk 1.", "admissible_actions": ADM})
        assert verbs_in(rec.requests[0].regex) == {"track", "commit", "recall", "note"}

        fact = {"kind": "object", "at": "drawer 3", "rel": "in", "attrs": {}}
        r = await c.patch(f"{base}/controls", json={"disabled_verbs": ["note", "recall"], "harness_cap": 1,
                                                     "pin_beliefs": {"pen 1": fact}})
        assert r.status_code == 200
        assert r.json()["controls"]["disabled_verbs"] == ["note", "recall"]
        rec.requests.clear()
        await c.post(f"{base}/step", json={"observation": "You arrive at desk 1. On the desk 1, you see a pen 1.",
                                            "admissible_actions": ADM})
        assert all(verbs_in(q.regex) <= {"track", "commit"} for q in rec.requests)
        assert len(rec.requests) <= 2                        # cap 1: at most one harness turn, then the env action
        state = (await c.get(f"{base}/state")).json()["state"]
        assert state["belief"]["entities"]["pen 1"] == fact  # perception saw the pen on the desk; the pin wins
        audit = (await c.get(f"{base}/audit")).json()["events"]
        control = [e for e in audit if e["kind"] == "control"]
        assert len(control) == 1 and "pinned_beliefs" in str(control[0]["patch"])

        await c.patch(f"{base}/controls", json={"unpin_beliefs": ["pen 1"], "harness_cap": 0})
        rec.requests.clear()
        await c.post(f"{base}/step", json={"observation": "You arrive at desk 1. On the desk 1, you see a pen 1.",
                                            "admissible_actions": ADM})
        assert len(rec.requests) == 1 and verbs_in(rec.requests[0].regex) == set()
        state = (await c.get(f"{base}/state")).json()["state"]
        assert state["belief"]["entities"]["pen 1"]["at"] == "desk 1"


async def test_bank_controls_apply_to_its_sessions_and_pins_stop_the_evolver(app_factory, vllm_engine):
    rec = Recording(vllm_engine)
    async with app_factory(engine=rec) as c:
        sid = (await c.post("/v1/sessions", json={"task": "t", "bank": "ops"})).json()["session_id"]
        r = await c.patch("/v1/banks/ops/controls", json={"disabled_verbs": ["track"]})
        assert r.status_code == 200
        await c.post(f"/v1/sessions/{sid}/step", json={"observation": "o", "admissible_actions": ADM})
        assert all("track" not in verbs_in(q.regex) for q in rec.requests)

        # an entry learned from a note, then pinned: later evidence cannot change or delete it
        state_sid = (await c.post("/v1/sessions", json={"task": "t", "bank": "ops"})).json()["session_id"]
        await c.patch(f"/v1/sessions/{state_sid}/controls", json={})
        await c.post(f"/v1/sessions/{sid}/end", json={"won": True})
        bank = (await c.get("/v1/banks/ops")).json()
        assert bank["controls"]["disabled_verbs"] == ["track"]
        audit = (await c.get("/v1/banks/ops/audit")).json()["events"]
        assert audit[0]["kind"] == "control" and audit[0]["version"] == 1
