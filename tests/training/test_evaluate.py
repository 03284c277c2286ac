"""Evaluation accounting: which prompt text counts as harness tokens."""

from __future__ import annotations

from service.domains import get_domain
from service.harness import new_state, observe
from service.policy.turns import prepare_turn
from training.evaluate import panel_text

OBS = "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a mug 1."
ADM = ["take apple 1 from countertop 1", "go to fridge 1", "look"]


def _prompt(mode: str) -> str:
    domain = get_domain("alfworld")
    task = "put a cool apple in fridge"
    state = new_state(task=task, domain="alfworld", mode=mode, bank="b", initial_belief=domain.initial_belief(task))
    state = observe(state, domain, OBS, ADM, False)
    return prepare_turn(state, {}, None).prompt


def test_always_on_prompts_carry_panels_that_count_as_harness_tokens():
    panels = panel_text(_prompt("always_on"))
    assert panels.startswith("Belief: ") and "apple 1" in panels
    assert OBS not in panels and "Admissible" not in panels


def test_inline_and_env_only_prompts_carry_no_panel_before_any_harness_call():
    assert panel_text(_prompt("inline")) == ""
    assert panel_text(_prompt("env_only")) == ""
