"""service.bank.evidence: the evidence record a finished episode hands the bank's evolver."""

from service.bank.evidence import evidence_of
from service.domains import get_domain
from service.harness import new_state


def state_with(first_seen: dict, task: str = "put a clean apple in fridge") -> dict:
    s = new_state(task=task, domain="alfworld", mode="inline", bank="default",
                  initial_belief=get_domain("alfworld").initial_belief(task))
    return {**s, "first_seen": first_seen}


def test_found_pairs_name_types_of_task_objects_once():
    ev = evidence_of(state_with({"apple 1": "countertop 2", "apple 2": "countertop 1", "mug 1": "shelf 1"}), True)
    assert ev["found"] == [["apple", "countertop"]] and ev["won"] is True
    assert ev["task"] == "put a clean apple in fridge" and ev["steps"] == 0 and ev["plan"] == []


def test_names_are_normalised_like_alfworld_perception():
    """One entity_type (service.domains.alfworld_text): case, articles and end punctuation do not matter."""
    ev = evidence_of(state_with({"An Apple 1": "the CounterTop 2.", "apple3": "fridge 1"}), False)
    assert ev["found"] == [["apple", "countertop"], ["apple", "fridge"]]
