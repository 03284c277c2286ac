"""The default evolver's rules (pure)."""

from service.bank.evolver import consolidate, new_bank


def ev(sid, won=True, **kw):
    base = {"session_id": sid, "task": "put a apple in fridge", "task_type": "pick_and_place_simple", "won": won,
            "notes": [], "recalled": [], "found": [], "plan": [], "steps": 10, "harness_calls": 2}
    base.update(kw)
    return base


def test_won_episodes_teach_search_priorities_and_plans():
    bank, ops = consolidate(new_bank(), [ev("s1", found=[["apple", "countertop"]],
                                            plan=["find apple", "put apple"])], 1)
    texts = sorted(e["text"] for e in bank["entries"].values())
    assert texts == ["apple is usually at countertop", "pick_and_place_simple: find apple -> put apple"]
    assert [o["op"] for o in ops] == ["add", "add"]
    bank, ops = consolidate(bank, [ev("s2", found=[["apple", "diningtable"]]),
                                   ev("s3", found=[["apple", "diningtable"]])], 2)
    where = next(e for e in bank["entries"].values() if e["key"] == "where:apple")
    assert where["text"] == "apple is usually at diningtable, countertop"
    assert where["evidence"] == 3 and [o["op"] for o in ops] == ["update", "update"]


def test_lost_episodes_teach_no_places():
    bank, ops = consolidate(new_bank(), [ev("s1", won=False, found=[["apple", "countertop"]])], 1)
    assert bank["entries"] == {} and ops == []
    assert bank["episodes"] == 1 and bank["wins"] == 0


def test_duplicate_notes_reinforce_and_mistakes_get_their_category():
    bank, ops = consolidate(new_bank(), [ev("a", notes=["open the fridge before looking inside"]),
                                         ev("b", notes=["open the fridge before looking inside it"]),
                                         ev("c", notes=["avoid taking the wrong apple"])], 1)
    cats = sorted((e["category"], e["evidence"]) for e in bank["entries"].values())
    assert cats == [("mistakes", 1), ("notes", 2)]
    assert [o["op"] for o in ops] == ["add", "update", "add"]


def test_entries_recalled_by_losers_are_deleted_unless_used_or_pinned():
    bank, _ = consolidate(new_bank(), [ev("a", notes=["look under the bed"]), ev("b", notes=["check the sink"])], 1)
    e_bed = next(e for e in bank["entries"].values() if "bed" in e["text"])
    e_sink = next(e for e in bank["entries"].values() if "sink" in e["text"])
    bank["entries"][e_sink["id"]]["pinned"] = True
    losers = [ev(f"l{i}", won=False, recalled=[e_bed["id"], e_sink["id"]]) for i in range(2)]
    bank2, ops = consolidate(bank, losers, 2)
    assert e_bed["id"] not in bank2["entries"]              # 2 failures > 1 evidence, used only twice
    assert e_sink["id"] in bank2["entries"]                  # pinned: untouched
    assert bank2["entries"][e_sink["id"]]["uses"] == 0
    assert {"op": "delete", "id": e_bed["id"], "why": "recalled by 2 losing episodes"} in ops


def test_delete_veto_for_entries_used_three_times():
    bank, _ = consolidate(new_bank(), [ev("a", notes=["look under the bed"])], 1)
    eid = next(iter(bank["entries"]))
    bank["entries"][eid]["uses"] = 3
    bank2, ops = consolidate(bank, [ev(f"l{i}", won=False, recalled=[eid]) for i in range(4)], 2)
    assert eid in bank2["entries"] and not any(o["op"] == "delete" for o in ops)


def test_cap_evicts_weakest_and_spares_pinned():
    bank = new_bank(cap=2)
    bank, _ = consolidate(bank, [ev("a", notes=["alpha one"]), ev("b", notes=["beta two"])], 1)
    first = "e1"
    bank["entries"][first]["pinned"] = True
    bank, ops = consolidate(bank, [ev("c", notes=["gamma three"]), ev("d", notes=["gamma three"])], 2)
    notes = [e for e in bank["entries"].values() if e["category"] == "notes"]
    assert len(notes) == 2 and first in bank["entries"]
    assert any(o["op"] == "delete" and o["id"] == "e2" for o in ops)


def test_consolidation_is_deterministic():
    evs = [ev(f"s{i}", notes=[f"note {i % 3}"], found=[["apple", f"r{i % 2}"]]) for i in range(6)]
    a = consolidate(new_bank(), evs, 1)
    b = consolidate(new_bank(), list(reversed(evs)), 1)
    assert a == b
