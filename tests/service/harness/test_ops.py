"""The harness runtime on its own (pure functions, generic domain)."""

import pytest

from service.domains import get_domain
from service.harness import allowed_verbs, apply_env_action, apply_verb, new_state, observe
from service.harness.ops import HarnessError, effective_controls

DOM = get_domain("generic")


def fresh(mode="inline", **kw):
    s = new_state(task="find the key", domain="generic", mode=mode, bank="b", initial_belief=DOM.initial_belief("t"),
                  **kw)
    return observe(s, DOM, "You see a key on the table.", ["take key", "look"])


def test_modes_decide_the_verbs():
    assert allowed_verbs(fresh("inline")) == ["track", "commit", "recall", "note"]
    assert allowed_verbs(fresh("always_on")) == []
    assert allowed_verbs(fresh("env_only")) == []


def test_switching_a_module_off_removes_its_verbs():
    s = fresh(modules={"experience": False})
    assert allowed_verbs(s) == ["track", "commit"]
    s = fresh(modules={"belief": False, "progress": False})
    assert allowed_verbs(s) == ["recall", "note"]


def test_per_step_cap_forces_an_env_action_and_resets_next_step():
    s = fresh(harness_cap=2)
    s, _ = apply_verb(s, DOM, "track", "key")
    assert allowed_verbs(s)
    s, _ = apply_verb(s, DOM, "commit", "take the key")
    assert allowed_verbs(s) == []
    s = apply_env_action(s, "take key")
    s = observe(s, DOM, "You take the key.", ["look"])
    assert allowed_verbs(s) == ["track", "commit", "recall", "note"]


def test_a_harness_call_spends_a_step_of_the_budget():
    s = fresh(max_steps=3)
    s, _ = apply_verb(s, DOM, "track", "key")
    assert s["budget"] == {"max_steps": 3, "used": 1, "env_steps": 0, "harness_calls": 1}
    # two steps left: one more verb would leave room for an env action
    assert allowed_verbs(s)
    s, _ = apply_verb(s, DOM, "track", "table")
    # one step left: it must go to an environment action
    assert allowed_verbs(s) == []
    s = apply_env_action(s, "take key")
    assert s["budget"]["used"] == 3 and s["budget"]["env_steps"] == 1


def test_operator_controls_union_disabled_and_take_tighter_cap():
    s = fresh(harness_cap=3)
    s["controls"]["disabled_verbs"] = ["note"]
    ctl = effective_controls(s, {"disabled_verbs": ["recall"], "harness_cap": 1})
    assert ctl == {"disabled_verbs": ["note", "recall"], "harness_cap": 1}
    assert allowed_verbs(s, {"disabled_verbs": ["recall"]}) == ["track", "commit"]


def test_commit_closes_open_subgoals_and_evicts_finished_first():
    s = fresh()
    for i in range(10):
        s, _ = apply_verb(s, DOM, "commit", f"goal {i}")
        s["step_harness_calls"] = 0
    goals = s["progress"]["subgoals"]
    assert len(goals) == 8
    assert goals[-1] == {"text": "goal 9", "status": "open"}
    assert all(g["status"] == "complete" for g in goals[:-1])
    assert goals[0]["text"] == "goal 2"


def test_recall_reads_the_bank_and_remembers_what_it_used():
    bank = {"e1": {"id": "e1", "category": "search_priority", "key": "where:key", "text": "key is usually at table",
                   "evidence": 2},
            "e2": {"id": "e2", "category": "notes", "key": None, "text": "open drawers first", "evidence": 1}}
    s, result = apply_verb(fresh(), DOM, "recall", "where is the key", bank)
    assert "key is usually at table" in result and "drawers" not in result
    assert s["recalled"] == ["e1"]
    s2, result = apply_verb(s, DOM, "recall", "banana", bank)
    assert result == "no experience about banana"


def test_note_is_buffered_once_and_empty_commit_is_refused():
    s, r = apply_verb(fresh(), DOM, "note", "keys are on tables")
    s, r2 = apply_verb(s, DOM, "note", "keys are on tables")
    assert s["notes"] == ["keys are on tables"] and "not kept" in r2
    with pytest.raises(HarnessError):
        apply_verb(s, DOM, "commit", " ")


def test_operations_never_mutate_their_input():
    s = fresh()
    before = repr(s)
    apply_verb(s, DOM, "commit", "x")
    apply_env_action(s, "look")
    observe(s, DOM, "obs", None)
    assert repr(s) == before


def test_pinned_belief_survives_perception():
    s = fresh()
    s["controls"]["pinned_beliefs"] = {"key 1": {"kind": "object", "at": "safe 1", "rel": "in", "attrs": {}}}
    s = apply_env_action(s, "look")
    s = observe(s, DOM, "The key 1 is on the table.", None)
    assert s["belief"]["entities"]["key 1"]["at"] == "safe 1"


def test_chains_of_operations_never_change_earlier_states():
    """New states share unchanged parts with their input (no deep copies): no state of a chain may move."""
    import copy

    bank = {"e1": {"id": "e1", "category": "notes", "key": None, "text": "the key is on the table", "evidence": 1}}
    alf = get_domain("alfworld")
    for dom, obs in ((DOM, ["You see a key on the table.", "You take the key."]),
                     (alf, ["You arrive at countertop 1. On the countertop 1, you see a apple 1, and a mug 1.",
                            "You pick up the apple 1 from the countertop 1."])):
        s = new_state(task="put a key in safe", domain=dom.name, mode="inline", bank="b",
                      initial_belief=dom.initial_belief("put a key in safe"), max_steps=40)
        chain = [s]
        for i in range(10):
            s = observe(s, dom, obs[i % 2], ["take key", "look"], won=False)
            chain.append(s)
            for verb, arg in (("commit", f"goal {i}"), ("note", f"n{i}"), ("recall", "key"), ("track", "key")):
                s, _ = apply_verb(s, dom, verb, arg, bank)
                chain.append(s)
            s = apply_env_action(s, "take key" if i % 2 else "look")
            chain.append(s)
        frozen = copy.deepcopy(chain)
        s = observe(s, dom, "You see a safe 1.", ["look"])
        s, _ = apply_verb(s, dom, "note", "last")
        s = apply_env_action(s, "look")
        assert chain == frozen
        assert len(chain[-1]["history"]) == chain[-1]["history_window"]
