"""The model evolver: its ops are applied under the bank's invariants; end to end with the real engine."""

import json
import re

from service.bank.evolver import consolidate, new_bank
from service.bank.model_evolver import OPS_SCHEMA, apply_ops


def bank_with_entries():
    bank, _ = consolidate(new_bank(),
                          [{"session_id": "a", "won": True, "notes": ["look in the fridge", "check sinks"]}], 1)
    return bank  # e1 "look in the fridge", e2 "check sinks"


def test_model_ops_respect_pins_veto_and_ids():
    bank = bank_with_entries()
    bank["entries"]["e1"]["pinned"] = True
    bank["entries"]["e2"]["uses"] = 3
    ops = [
        {"op": "update", "id": "e1", "text": "changed"},          # pinned
        {"op": "delete", "id": "e2"},                              # veto: used 3 times
        {"op": "delete", "id": "e9"},                              # unknown
        {"op": "add", "category": "notes", "text": ""},            # empty
        {"op": "add", "category": "mistakes", "text": "avoid the bathtub"},
        {"op": "update", "id": "e2", "text": "check sinks and basins"},
    ]
    new, applied, rejected = apply_ops(bank, [], ops, 2)
    assert new["entries"]["e1"]["text"] == "look in the fridge"
    assert new["entries"]["e2"]["text"] == "check sinks and basins"
    assert [o["op"] for o in applied] == ["add", "update"]
    assert [r["why"] for r in rejected] == ["entry is pinned", "entry used 3 times or more", "no such entry",
                                           "add needs a category and a text"]


async def test_consolidate_with_the_served_model(app_factory):
    async with app_factory() as c:
        sid = (await c.post("/v1/sessions", json={"task": "t", "bank": "llm"})).json()["session_id"]
        await c.post(f"/v1/sessions/{sid}/end", json={"won": True})
        r = await c.post("/v1/banks/llm/consolidate", params={"evolver": "model"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["evolver"] == "model" and body["evidence"] == 1
        ev = (await c.get("/v1/banks/llm/audit")).json()["events"][-1]
        assert ev["kind"] == "consolidate" and ev["evolver"] == "model"
        assert ev["model"] != "rules" and ev["usage"]["completion_tokens"] > 0
        if ev["error"] is None:                      # a complete answer is valid JSON under the schema
            out = json.loads(ev["raw"])
            assert set(out) == {"ops"} and len(out["ops"]) <= OPS_SCHEMA["properties"]["ops"]["maxItems"]
            assert all(o["op"] in ("add", "update", "merge", "delete") for o in out["ops"])
        else:
            assert re.match(r"unparseable", ev["error"])
        bank = (await c.get("/v1/banks/llm")).json()
        assert bank["pending_evidence"] == 0 and bank["version"] == ev["version"]
        r = await c.post("/v1/banks/llm/consolidate", params={"evolver": "oracle"})
        assert r.status_code == 422


def test_a_large_bank_is_shown_within_the_prompt_bound_pinned_and_used_entries_first():
    from service.bank.model_evolver import render_request

    bank = new_bank()
    for i in range(200):
        bank["entries"][f"e{i}"] = {"id": f"e{i}", "category": "search_priority", "key": f"where:o{i}",
                                    "text": f"object {i} is usually at shelf {i}", "evidence": 1, "uses": 0,
                                    "failures": 0, "pinned": False, "data": {}, "created_in": 1, "updated_in": 1}
    ids = list(bank["entries"])
    bank["entries"][ids[-1]]["pinned"] = True
    bank["entries"][ids[-2]]["uses"] = 9
    evidence = [{"task_type": "pick", "won": True, "notes": ["x" * 50]}] * 3
    full = render_request(bank, evidence)
    bounded = render_request(bank, evidence, max_chars=3000)
    assert len(full) > 10_000 and len(bounded) < 3000 + 600        # the bound plus the fixed instructions
    assert "more entries not shown)" in bounded and "more entries not shown" not in full
    shown = json.loads(bounded.split("Bank (")[1].split(": ", 1)[1].split("\nEpisodes: ")[0])
    assert [e["id"] for e in shown[:2]] == [ids[-1], ids[-2]]       # pinned, then the most used
    assert '"notes": ["' + "x" * 50 in bounded
