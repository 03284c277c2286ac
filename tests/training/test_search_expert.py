"""The search expert wins real ALFWorld games from Belief alone, and DAgger-labelled episodes render as intended."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("ALFWORLD_DATA", str(Path(__file__).resolve().parents[2] / "data" / "alfworld-home"))

from service.domains import get_domain  # noqa: E402
from training.search_expert import SearchExpert  # noqa: E402


def test_search_expert_wins_fixture_games_of_every_task_type():
    from training.envs.alfworld.env import AlfWorldEnv
    from training.envs.alfworld.paths import fixture_games

    dom, expert = get_domain("alfworld"), SearchExpert()
    env = AlfWorldEnv(expert_type=None, max_steps=50)
    won = {}
    try:
        for game in fixture_games()[::2]:           # one game of each of the six task types
            st = env.reset(game)
            belief = dom.perceive(dom.initial_belief(st["task"]), st["observation"], None)
            while not st["done"]:
                action = expert.act(belief, st["admissible_actions"])
                assert action in st["admissible_actions"]
                st = env.step(action)
                belief = dom.perceive(belief, st["observation"], action)
            won[game.name] = (st["won"], env.steps)
    finally:
        env.close()
    assert all(w for w, _ in won.values()), won
    assert sum(s for _, s in won.values()) / len(won) < 20, won


def test_expert_labels_any_state_from_belief():
    """Mid-episode, after a detour the expert never made, it still names the way forward."""
    dom, expert = get_domain("alfworld"), SearchExpert()
    task = "put some apple on countertop"
    b = dom.perceive(dom.initial_belief(task), "You are in the middle of a room. Looking quickly around you, you see "
                     "a cabinet 1, a countertop 1, a fridge 1, and a table 1.", None)
    b = dom.perceive(b, "You arrive at table 1. On the table 1, you see a apple 1.", "go to table 1")
    b = dom.perceive(b, "You arrive at cabinet 1. The cabinet 1 is closed.", "go to cabinet 1")
    adm = ["go to table 1", "go to countertop 1", "go to fridge 1", "open cabinet 1", "look"]
    assert expert.act(b, adm) == "go to table 1"     # the apple was seen there
    b = dom.perceive(b, "You arrive at table 1. On the table 1, you see a apple 1.", "go to table 1")
    assert expert.act(b, ["take apple 1 from table 1", "go to countertop 1"]) == "take apple 1 from table 1"
    b = dom.perceive(b, "You pick up the apple 1 from the table 1.", "take apple 1 from table 1")
    assert expert.act(b, ["go to countertop 1", "move apple 1 to table 1"]) == "go to countertop 1"


def test_dagger_episode_targets_the_label_and_follows_the_executed_action():
    from training.sft import episodes_of
    from training.teacher import render_episode

    room = ("You are in the middle of a room. Looking quickly around you, you see a countertop 1, a shelf 1, "
            "and a table 1.")
    adm = ["go to countertop 1", "go to shelf 1", "go to table 1", "look"]
    traj = {"game": "g", "task_text": "put some apple on countertop", "won": False, "expert": "dagger",
            "steps": [{"observation": room, "admissible": adm, "won": False},
                      {"observation": "You arrive at shelf 1. On the shelf 1, you see nothing.", "admissible": adm,
                       "won": False},
                      {"observation": "You arrive at table 1. On the table 1, you see a apple 1.", "admissible": adm,
                       "won": False}],
            "actions": ["go to shelf 1", "go to table 1"], "labels": ["go to table 1", "go to table 1"]}
    rows, _ = render_episode(traj, "env_only", {"entries": {}, "controls": {}})
    assert "<action>go to table 1</action>" in rows[0]["completion"]          # the label, not the executed action
    assert "<action>go to shelf 1</action>" in rows[1]["prompt"]               # the prompt follows what was done
    assert {r["source"] for r in rows} == {"dagger"}
    seqs = episodes_of(rows)
    assert [len(s["spans"]) for s in seqs] == [1, 1]                           # the divergence ends a sequence
