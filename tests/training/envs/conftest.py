"""ALFWorld fixtures: the committed games (unpacked once) and shared environments on the real engine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("ALFWORLD_DATA", str(Path(__file__).resolve().parents[3] / "data" / "alfworld-home"))


@pytest.fixture(scope="session")
def alf_games():
    from training.envs.alfworld.paths import fixture_games

    games = fixture_games()
    assert len(games) >= 12
    return games


@pytest.fixture(scope="session")
def alf_envs():
    """One env per expert type for the whole session (loading TextWorld/Fast Downward is the slow part)."""
    from training.envs.alfworld.env import AlfWorldEnv

    envs = {t: AlfWorldEnv(expert_type=t, max_steps=60) for t in (None, "planner", "handcoded")}
    yield envs
    for env in envs.values():
        env.close()


@pytest.fixture(scope="session")
def expert_results(alf_games, alf_envs):
    """Both experts played on every fixture game once (shared by the expert and driver tests)."""
    from training.envs.alfworld.episode import play_episode
    from training.envs.alfworld.policies import ExpertPolicy

    out = {}
    for expert in ("planner", "handcoded"):
        policy = ExpertPolicy(expert)
        out[expert] = [play_episode(alf_envs[expert], policy, g, keep_transcript=True) for g in alf_games]
    return out
