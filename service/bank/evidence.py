"""What a finished episode teaches its Experience bank: the evidence record `service.bank.evolver.consolidate` takes.

Pure: the service (`SessionService.end`), the teacher and the in-memory agent all build evidence here.
"""

from __future__ import annotations

from service.domains.alfworld_text import entity_type


def evidence_of(state: dict, won: bool) -> dict:
    """What a finished episode teaches the bank (see service.bank.evolver)."""
    task_words = set(state["task"].lower().replace(",", " ").split())
    found = []
    for name, at in state.get("first_seen", {}).items():
        obj = entity_type(name)
        if obj in task_words:
            pair = [obj, entity_type(at)]
            if pair not in found:
                found.append(pair)
    return {
        "task": state["task"],
        "task_type": state["belief"].get("task_type"),
        "won": won,
        "notes": state["notes"],
        "recalled": state["recalled"],
        "found": found,
        "plan": [g["text"] for g in state["progress"]["subgoals"]],
        "steps": state["budget"]["used"],
        "harness_calls": state["budget"]["harness_calls"],
    }
