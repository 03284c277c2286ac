"""Environment wrapper on the real TextWorld engine."""

from __future__ import annotations

import random

import pytest

from training.envs.alfworld.env import AlfWorldEnv


def test_reset_and_step_shapes(alf_games, alf_envs):
    env = alf_envs[None]
    first = env.reset(alf_games[0])
    assert first["observation"].startswith("You are in the middle of a room.")
    assert "Your task is to" not in first["observation"]
    assert first["task"] and not first["task"].endswith(".")
    assert "look" in first["admissible_actions"] and first["won"] is False and first["done"] is False
    result = env.step(first["admissible_actions"][0])
    assert set(result) >= {"observation", "admissible_actions", "won", "done"}
    assert env.step("fly to the moon")["observation"] == "Nothing happens."


def test_walkthrough_wins(alf_games, alf_envs):
    env = alf_envs[None]
    for game in alf_games:
        env.reset(game)
        for action in env.walkthrough():
            result = env.step(action)
        assert result["won"] and result["done"], game.name


def test_step_budget_ends_the_episode(alf_games):
    env = AlfWorldEnv(max_steps=3)
    env.reset(alf_games[1])
    results = [env.step("look") for _ in range(3)]
    assert [r["done"] for r in results] == [False, False, True]
    assert not results[-1]["won"]
    with pytest.raises(RuntimeError):
        env.step("look")
    env.close()


def test_expert_runs_leave_the_callers_random_state_alone(alf_games, alf_envs):
    random.seed(123)
    expected = random.Random(123).random()
    env = alf_envs["handcoded"]
    state = env.reset(alf_games[2])
    while not state["done"]:
        state = env.step(state["expert_plan"][0])
    assert random.random() == expected
