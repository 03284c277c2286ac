"""The cost-aware reward: each term of the study's formula and the explicit harness cost."""

from __future__ import annotations

import math

import pytest

from training.grpo import advantages
from training.reward import (
    RewardConfig,
    count_repeats,
    diversity_weight,
    episode_reward,
)


def ep(**kw):
    base = {"won": True, "steps": 10, "max_steps": 50, "env_actions": ["go to a 1", "take x 1 from a 1"],
            "observations": [], "calls": [], "invalid_outputs": 0}
    return {**base, **kw}


def test_win_and_success_gated_efficiency():
    r = episode_reward(ep(), update=150)
    assert r["win"] == 10 and r["efficiency"] == pytest.approx(40 / 50)
    lost = episode_reward(ep(won=False), update=150)
    assert lost["win"] == 0 and lost["efficiency"] == 0 and lost["total"] == 0


def test_diversity_is_annealed_to_zero():
    cfg = RewardConfig(div_anneal_updates=100)
    assert diversity_weight(0, cfg) == pytest.approx(1.0)
    assert diversity_weight(50, cfg) == pytest.approx(0.5)
    assert diversity_weight(100, cfg) == pytest.approx(0.0) and diversity_weight(500, cfg) == pytest.approx(0.0)
    calls = [{"verb": "recall", "arg": "apple"}, {"verb": "commit", "arg": "take apple"}]
    r = episode_reward(ep(calls=calls), update=0, cfg=RewardConfig(cost_per_call=0))
    assert r["diversity"] == pytest.approx(0.5)


def test_repeats_and_invalid_are_penalised_and_capped():
    assert count_repeats(["look", "look", "look", "go to a 1"], [{"verb": "track", "arg": "x"},
                                                                  {"verb": "track", "arg": "x"}]) == 3
    r = episode_reward(ep(env_actions=["look"] * 30, observations=["Nothing happens."] * 3, invalid_outputs=1),
                       update=150)
    assert r["repeat"] == pytest.approx(-1.0)          # min(29, 10) * 0.1
    assert r["invalid"] == pytest.approx(-0.4)


def test_explicit_cost_per_call_token_and_second():
    calls = [{"verb": "recall", "arg": "a", "tokens": 300, "seconds": 0.5},
             {"verb": "track", "arg": "b", "tokens": 100, "seconds": 1.5}]
    cfg = RewardConfig(cost_per_call=0.1, cost_per_token=0.001, cost_per_second=0.2, lambda_div_max=0)
    r = episode_reward(ep(calls=calls), update=0, cfg=cfg)
    assert r["cost"] == pytest.approx(-(0.2 + 0.4 + 0.4))
    assert r["total"] == pytest.approx(sum(r[k] for k in ("win", "efficiency", "diversity", "repeat", "invalid",
                                                          "cost")))


def test_group_advantages_are_normalised():
    a = advantages([10.0, 0.0, 0.0, 10.0])
    assert sum(a) == pytest.approx(0) and max(a) == pytest.approx(1, rel=1e-3)
    assert all(math.isclose(x, 0) for x in advantages([3.0, 3.0]))
