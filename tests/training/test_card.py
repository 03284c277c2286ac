"""training.card: carrying what a work folder cannot report from the previous card of the same policy."""

from training.card import CARRIED, card_sections, carry_over

PREVIOUS = """# EvoHarness default policy (trained)

intro

## Targets (issue 12)

| target | value | this run | |
|---|---|---|---|
| success, valid_unseen inline greedy | ≥ 80 % | 90.0 % | met on the first 40 games only (evaluation stopped) |
| success, valid_seen inline | ≥ 85 % | - | not measured |
| held-out constrained exact action after SFT (more) | ≥ 95 % | 93.3 % | missed |

## SFT continued on more games

Training: 60 steps.

## DAgger

not run
"""

NOW = {
    "Targets (issue 12)": "\n".join([
        "| target | value | this run | |", "|---|---|---|---|",
        "| success, valid_unseen inline greedy | ≥ 80 % | 85.1 % | met |",
        "| success, valid_seen inline | ≥ 85 % | 88.0 % | met |",
        "| held-out constrained exact action after SFT (sft) | ≥ 95 % | - | not measured |"]),
    "SFT continued on more games": "not run",
    "DAgger": "not run",
    "GRPO": "not run",
}


def test_card_sections_split_by_title():
    secs = card_sections(PREVIOUS)
    assert list(secs) == ["Targets (issue 12)", "SFT continued on more games", "DAgger"]
    assert secs["SFT continued on more games"] == "Training: 60 steps."


def test_carry_fills_only_what_this_run_lacks_and_marks_it():
    out = carry_over(NOW, PREVIOUS)
    rows = out["Targets (issue 12)"].splitlines()
    assert rows[2].endswith("| 85.1 % | met |")                   # measured now: kept, not the old 90.0 %
    assert rows[3].endswith("| 88.0 % | met |")
    assert "93.3 %" in rows[4] and rows[4].endswith("missed (carried) |")   # matched by name, stage aside
    assert out["SFT continued on more games"].startswith(CARRIED)
    assert out["SFT continued on more games"].endswith("Training: 60 steps.")
    assert out["DAgger"] == "not run"                               # missing on both sides: stays missing
    assert out["GRPO"] == "not run"


def test_carrying_twice_does_not_stack_marks():
    once = carry_over(NOW, PREVIOUS)
    text = "\n\n".join(f"## {t}\n\n{b}" for t, b in once.items())
    twice = carry_over(NOW, text)
    assert twice["SFT continued on more games"].count(CARRIED) == 1
    assert twice["Targets (issue 12)"].count("(carried)") == 1
