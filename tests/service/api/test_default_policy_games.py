"""The shipped default policy, served by a real `evoharness serve` (vLLM, private Redis), plays real ALFWorld fixture
games through the public HTTP API exactly as a product agent would: observation in, action out, until won or out of
steps. Every action must be admissible; the policy must win some of them (a policy that never wins fails here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.client import EvoHarnessClient
from tests.deploy.live_server import live_server

ROOT = Path(__file__).resolve().parents[3]
POLICY = ROOT / "models" / "default-policy"
GAMES = (0, 2, 3, 7)    # fixture games of four task types: heat, clean, pick, cool
MAX_STEPS = 50

pytestmark = pytest.mark.timeout(1500)


def test_default_policy_wins_fixture_games_through_the_http_api(tmp_path):
    os.environ.setdefault("ALFWORLD_DATA", str(ROOT / "data" / "alfworld-home"))
    from training.envs.alfworld.env import AlfWorldEnv
    from training.envs.alfworld.paths import fixture_games

    games = [fixture_games()[i] for i in GAMES]
    env = AlfWorldEnv(max_steps=MAX_STEPS)
    results = []
    with live_server(POLICY, tmp_path / "serve.log", EVOHARNESS_MAX_MODEL_LEN="4096") as url, \
            EvoHarnessClient(url) as evo:
        try:
            for game in games:
                st = env.reset(game)
                sid = evo.create_session(st["task"], domain="alfworld", mode="inline",
                                         max_steps=MAX_STEPS + 20).session_id
                calls = 0
                while not st["done"]:
                    step = evo.step(sid, st["observation"], st["admissible_actions"], won=st["won"])
                    assert step.action in st["admissible_actions"], step.action
                    calls += step.usage.harness_calls
                    st = env.step(step.action)
                evo.step(sid, st["observation"], st["admissible_actions"], won=st["won"], done=True)
                evo.end(sid, won=st["won"])
                events = evo.audit_all(sid)
                assert sum(e["kind"] == "env" for e in events) == st["steps"]   # one env turn per game step
                results.append((game.name, st["won"], st["steps"], calls))
        finally:
            env.close()
    print(results)
    assert sum(won for _, won, _, _ in results) >= 3, results
