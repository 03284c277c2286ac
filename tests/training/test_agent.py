"""training.agent: the episode call budget and disabled verbs of the ablations and paired rollouts.

The engine is the ScriptedEngine (this module's unit test): it calls `commit` whenever the grammar it is given
still offers that verb, so the count of calls shows what the agent allowed."""

import asyncio
import re

from service.policy.engines.scripted import ScriptedEngine
from training.agent import HarnessAgent

TASK = "Your task is to: put some apple in fridge."
OBS = "You are in the middle of a room. Looking quickly around you, you see a fridge 1 and a table 1."
ADMISSIBLE = ["go to fridge 1", "go to table 1", "look"]


def eager_caller(req):
    """Commit while the grammar allows it, else the first admissible action."""
    if req.regex and "commit" in req.regex:
        return "<think>plan</think><action>commit [find apple]</action>"
    return "<think>go</think><action>go to table 1</action>"


def calls_by_step(steps: int, **kwargs) -> list[int]:
    agent = HarnessAgent(ScriptedEngine(responder=eager_caller), TASK, harness_cap=3, **kwargs)

    async def play():
        out = []
        for _ in range(steps):
            action, outcome = await agent.step(OBS, ADMISSIBLE)
            assert action == "go to table 1"
            out.append(outcome.harness_calls)
        return out

    return asyncio.run(play())


def test_without_a_budget_each_step_may_call_up_to_the_cap():
    assert calls_by_step(3) == [3, 3, 3]


def test_the_episode_budget_bounds_calls_across_steps():
    assert calls_by_step(4, call_budget=5) == [3, 2, 0, 0]
    assert calls_by_step(2, call_budget=0) == [0, 0]


def test_a_disabled_verb_is_never_offered():
    seen = []

    def responder(req):
        seen.append(req.regex or "")
        return eager_caller(req)

    agent = HarnessAgent(ScriptedEngine(responder=responder), TASK, disabled_verbs=("commit",))
    _, outcome = asyncio.run(agent.step(OBS, ADMISSIBLE))
    assert outcome.harness_calls == 0
    assert seen and not any(re.search("commit", r) for r in seen)
    assert any("recall" in r for r in seen)           # the other verbs stay offered
