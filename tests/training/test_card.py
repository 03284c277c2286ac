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


def test_the_grpo_section_says_whether_the_card_s_policy_is_grpo_s_adapter(tmp_path):
    import json

    from training.card import grpo_section

    work, policy = tmp_path / "work", tmp_path / "policy"
    (work / "grpo" / "adapter").mkdir(parents=True)
    (policy / "adapter").mkdir(parents=True)
    row = {"update": 0, "reward": 4.8, "success": 0.5, "harness_calls_per_episode": 1.9, "tokens_per_episode": 4e4,
           "steps_per_episode": 32.0, "rollout_seconds": 91.6, "update_seconds": 47.4, "seconds": 164.1}
    (work / "grpo" / "grpo_log.jsonl").write_text(json.dumps(row) + "\n")
    (work / "grpo" / "grpo_report.json").write_text(json.dumps({"config": {"updates": 1, "reward": {}}, "log": [row]}))
    (work / "grpo" / "adapter" / "adapter_model.safetensors").write_bytes(b"after GRPO")
    (policy / "adapter" / "adapter_model.safetensors").write_bytes(b"before GRPO")
    text = grpo_section(work, policy)
    assert "Not shipped" in text and "| 0 | 4.8 | 0.5 | 1.9 |" in text
    (policy / "adapter" / "adapter_model.safetensors").write_bytes(b"after GRPO")
    assert "This card's policy is GRPO's adapter" in grpo_section(work, policy)


def test_the_make_policy_row_is_read_from_the_run_and_counts_only_a_whole_run(tmp_path):
    import json

    from training.card import targets_section

    assert "| `make policy` end to end on the card's machine | ≤ 150 min | - | not measured |" in targets_section(
        tmp_path)
    ran = [{"stage": s, "seconds": 60.0} for s in ("generate-train", "teacher", "sft", "export", "eval-policy")]
    (tmp_path / "pipeline.json").write_text(json.dumps({"seconds": 8000.0, "ran": ran}))
    assert "| ≤ 150 min | 133 min | met |" in targets_section(tmp_path)
    (tmp_path / "pipeline.json").write_text(json.dumps({"seconds": 9500.0, "ran": ran}))
    assert "| ≤ 150 min | 158 min | missed |" in targets_section(tmp_path)
    (tmp_path / "pipeline.json").write_text(json.dumps({"seconds": 600.0, "ran": ran[3:]}))   # SFT reused
    assert "(some stages were reused, not rerun) | not measured |" in targets_section(tmp_path)


def test_the_held_out_row_reads_the_last_stage_that_trained_the_shipped_adapter(tmp_path):
    import json

    from training.card import calls_section, more_rounds_section, targets_section

    def report(folder: str, exact: float) -> None:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "sft_report.json").write_text(json.dumps({
            "config": {"max_steps": 24, "batch": 4, "lr": 1e-4, "modes": {"inline": 1.0}, "init_adapter": "a"},
            "log": [{"loss": 0.02}, {"loss": 0.01}], "seconds": 10.0, "constrained_eval": {"exact_action": exact}}))

    assert calls_section(tmp_path, tmp_path / "teacher") == "not run"
    report("more", 0.933)
    assert "| held-out constrained exact action after SFT (more) | ≥ 95 % | 93.3 % | missed |" in targets_section(
        tmp_path)
    report("more-r2", 0.95)
    assert "| held-out constrained exact action after SFT (more-r2) | ≥ 95 % | 95.0 % | met |" in targets_section(
        tmp_path)
    report("calls", 0.967)
    assert "| held-out constrained exact action after SFT (calls) | ≥ 95 % | 96.7 % | met |" in targets_section(
        tmp_path)
    assert "**Round 2.** Teacher data: not available" in more_rounds_section(tmp_path, tmp_path / "teacher-more")
    text = calls_section(tmp_path, tmp_path / "teacher")
    assert "SFT steps 24 × 4 episodes" in text and "Loss 0.020 → 0.010" in text


def test_a_round_that_replayed_earlier_rounds_says_which(tmp_path):
    import json

    from training.card import sft_section

    (tmp_path / "more-r2").mkdir()
    cfg = {"max_steps": 60, "batch": 4, "lr": 1e-4, "modes": {"inline": 1.0}, "init_adapter": "a",
           "data": "data/teacher-more-r2", "replay_data": []}
    rep = {"config": cfg, "log": [], "seconds": 1.0, "constrained_eval": {"exact_action": 1.0}}
    (tmp_path / "more-r2" / "sft_report.json").write_text(json.dumps(rep))
    assert "replayed" not in sft_section(tmp_path, "more-r2")
    cfg["replay_data"] = ["data/teacher-more"]
    (tmp_path / "more-r2" / "sft_report.json").write_text(json.dumps(rep))
    assert ("on `data/teacher-more-r2` with the episodes of `data/teacher-more` replayed; "
            in sft_section(tmp_path, "more-r2"))
