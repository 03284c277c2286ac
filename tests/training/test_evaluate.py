"""Evaluation accounting: which prompt text counts as harness tokens."""

from __future__ import annotations

import pytest

from service.domains import get_domain
from service.harness import new_state, observe
from service.policy.turns import prepare_turn
from training.evaluate import newest_user_message, panel_text

OBS = "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a mug 1."
ADM = ["take apple 1 from countertop 1", "go to fridge 1", "look"]


def _prompt(mode: str) -> str:
    domain = get_domain("alfworld")
    task = "put a cool apple in fridge"
    state = new_state(task=task, domain="alfworld", mode=mode, bank="b", initial_belief=domain.initial_belief(task))
    state = observe(state, domain, OBS, ADM, False)
    return prepare_turn(state, {}, None).prompt


def test_always_on_prompts_carry_panels_that_count_as_harness_tokens():
    message = newest_user_message(_prompt("always_on"))
    assert message.startswith("Task: put a cool apple in fridge\n" + OBS)
    panels = panel_text(message)
    assert panels.startswith("Belief: ") and "apple 1" in panels
    assert OBS not in panels and "Admissible" not in panels


def test_inline_and_env_only_prompts_carry_no_panel_before_any_harness_call():
    assert panel_text(newest_user_message(_prompt("inline"))) == ""
    assert panel_text(newest_user_message(_prompt("env_only"))) == ""


def test_concurrent_episodes_report_every_game_in_order_with_its_own_harness_record(tmp_path):
    """Three fixture games in flight at once through one real vLLM engine: every game is reported once, in the
    input order, with its own step count, harness extras and bank evidence (no state shared between twins)."""
    import json
    import os
    from pathlib import Path

    os.environ.setdefault("ALFWORLD_DATA", str(Path(__file__).resolve().parents[2] / "data" / "alfworld-home"))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from training.evaluate import games_for, main

    model = Path(__file__).resolve().parents[2] / "models" / "default-policy"
    assert main(["--model", str(model), "--split", "fixtures", "--n", "3", "--mode", "inline", "--max-steps", "4",
                 "--window", "3", "--concurrency", "3", "--kv-cache-gib", "0.1", "--max-model-len", "1024", "--eager",
                 "--engine-kwargs", '{"block_size": 32}', "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "eval.json").read_text())
    episodes = report["episodes"]["fixtures/inline"]
    assert report["concurrency"] == 3 and report["engine_kwargs"] == {"block_size": 32}
    assert [e["game"] for e in episodes] == [g.name for g in games_for("fixtures", 3)]
    for e in episodes:
        assert 1 <= e["steps"] <= 4 and e["prompt_tokens"] > 0
        assert e["steps_used"] == e["steps"] + e["harness_calls"]   # the twin's state saw exactly this game
        assert sum(e["by_verb"].values()) == e["harness_calls"]
    assert report["results"]["fixtures/inline"]["overall"]["games"] == 3
    # each episode's whole chat is kept beside the report (not in it), ending with the policy's last completion
    for e in episodes:
        assert "transcript" not in e
        chat = (tmp_path / "transcripts" / "fixtures-inline" / f"{e['game']}.txt").read_text()
        assert chat.startswith("<|im_start|>system") and chat.count("<|im_start|>assistant") == e["steps_used"]
    # the episode is one growing chat: later steps find their prefix in vLLM's cache, and the report says how much
    cache = report["prefix_cache"]["fixtures/inline"]
    prompt_tokens = sum(e["prompt_tokens"] for e in episodes)
    assert 0 < cache["hit_tokens"] < cache["queried_tokens"] and cache["queried_tokens"] >= 0.9 * prompt_tokens
    assert report["dtype"] in ("bfloat16", "float32") and "Prefix cache" in (tmp_path / "eval.md").read_text()


def _episode(game: str, won: bool, task_type: str = "pick_and_place_simple") -> dict:
    return {"game": game, "task_type": task_type, "won": won, "steps": 5 if won else 50, "harness_calls": 2,
            "prompt_tokens": 100, "completion_tokens": 20, "by_verb": {"commit": 2}, "harness_tokens": 30,
            "harness_call_tokens": 30, "panel_tokens": 0}


def test_merge_reports_summarizes_the_episodes_of_both_processes_in_order(tmp_path):
    import json

    from training.evaluate import merge_reports, summarize_mode

    key = "valid_unseen/inline"
    parts = []
    for i, episodes in enumerate(([_episode("g0", True), _episode("g1", False)], [_episode("g2", True)])):
        folder = tmp_path / f"part{i}"
        folder.mkdir()
        report = {"model": "m", "max_steps": 50, "n": 2, "results": {key: summarize_mode(episodes, {"entries": {}})},
                  "seconds": {key: 10.0 * (i + 1)}, "episodes": {key: episodes}, "partial": {key: None}}
        (folder / "eval.json").write_text(json.dumps(report))
        parts.append(str(folder))
    merged = merge_reports(parts, tmp_path / "merged")
    overall = merged["results"][key]["overall"]
    assert [e["game"] for e in merged["episodes"][key]] == ["g0", "g1", "g2"]
    assert (overall["games"], overall["won"], overall["success_pct"]) == (3, 2, 66.7)
    assert merged["seconds"][key] == 20.0
    assert merged["partial"][key] is None
    assert json.loads((tmp_path / "merged" / "eval.json").read_text())["merged_from"] == parts
    assert (tmp_path / "merged" / "eval.md").read_text().startswith("| split |")


def test_merge_reports_joins_one_process_per_split(tmp_path):
    import json

    from training.evaluate import merge_reports, summarize_mode

    parts = []
    for key, episodes, cache in (("valid_unseen/inline", [_episode("u0", True), _episode("u1", False)], (100, 90)),
                                 ("valid_seen/inline", [_episode("s0", False)], (50, 40))):
        folder = tmp_path / key.split("/")[0]
        folder.mkdir()
        report = {"model": "m", "max_steps": 50, "results": {key: summarize_mode(episodes, {"entries": {}})},
                  "seconds": {key: 7.0}, "episodes": {key: episodes}, "partial": {key: None},
                  "prefix_cache": {key: {"queried_tokens": cache[0], "hit_tokens": cache[1], "hit_pct": None}}}
        (folder / "eval.json").write_text(json.dumps(report))
        parts.append(str(folder))
    merged = merge_reports(parts, tmp_path / "merged")
    assert list(merged["results"]) == ["valid_unseen/inline", "valid_seen/inline"]
    assert merged["results"]["valid_unseen/inline"]["overall"]["won"] == 1
    assert merged["results"]["valid_seen/inline"]["overall"]["games"] == 1
    assert merged["prefix_cache"]["valid_seen/inline"] == {"queried_tokens": 50, "hit_tokens": 40, "hit_pct": 80.0}
    assert merged["partial"] == {"valid_unseen/inline": None, "valid_seen/inline": None}   # neither was stopped
    assert "valid_seen" in (tmp_path / "merged" / "eval.md").read_text()


class _RecordingSlots:
    """Stands in for ``EpisodeSlots`` (this module's unit test): each episode records the bank it started with."""

    def __init__(self, concurrency: int, hold_first_until_started: str | None = None):
        import threading

        self.all = [None] * concurrency
        self.seen: dict[str, int] = {}
        self.started = {g: threading.Event() for g in "abcdefghij"}
        self.hold = hold_first_until_started

    def play(self, game, mode=None, bank=None):
        self.seen[game] = bank["episodes"]
        self.started[game].set()
        if game == "a" and self.hold:                     # the first window's slow episode
            assert self.started[self.hold].wait(10), f"{self.hold} did not start while a was still playing"
        return {"game": game}, {"won": False, "session_id": game}


@pytest.mark.parametrize("lag", [0, 1])
def test_each_window_starts_with_the_bank_of_the_windows_lag_behind_it_in_game_order(lag):
    from service.bank.evolver import new_bank
    from training.evaluate import evaluate_one

    slots, games = _RecordingSlots(3), list("abcdefghij")   # windows abc, def, ghi, j
    results, bank = evaluate_one(slots, games, "inline", new_bank(), window=3, lag=lag)
    assert [r["game"] for r in results] == games and bank["episodes"] == 10
    for i, g in enumerate(games):
        assert slots.seen[g] == 3 * max(0, i // 3 - lag), g


def test_with_a_lag_the_next_window_fills_the_slots_while_a_slow_episode_finishes():
    from service.bank.evolver import new_bank
    from training.evaluate import evaluate_one

    slots = _RecordingSlots(3, hold_first_until_started="e")  # game a returns only once window def is playing
    results, _ = evaluate_one(slots, list("abcdef"), "inline", new_bank(), window=3, lag=1)
    assert [r["game"] for r in results] == list("abcdef")
