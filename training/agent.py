"""The harness policy in memory: the service's own runtime (observe -> turn loop) without Redis or HTTP.

Training rollouts and evaluation drive exactly what the service drives: `service.harness.observe`,
`service.policy.turns.run_step` (the one renderer, grammar and parser), and an `Engine`. Only storage differs.

    agent = HarnessAgent(engine, task, mode="inline", bank=bank_state)   # bank_state: service.bank.evolver.new_bank()
    action, outcome = await agent.step(observation, admissible)
    evidence = agent.evidence(won)                                          # feed service.bank.evolver.consolidate

`EnginePolicy` adapts it to the synchronous `Policy` protocol of training.envs.alfworld.driver.
"""

from __future__ import annotations

import asyncio
import copy
import threading

from service.bank.evidence import evidence_of
from service.domains import get_domain
from service.harness import new_state, observe
from service.policy.engines.base import Engine
from service.policy.turns import Sampling, StepOutcome, run_step


class HarnessAgent:
    def __init__(self, engine: Engine, task: str, *, domain: str = "alfworld", mode: str = "inline",
                 bank: dict | None = None, harness_cap: int = 3, max_steps: int | None = None,
                 modules: dict | None = None, sampling: Sampling = Sampling(), transcript_chars: int | None = None,
                 call_budget: int | None = None, disabled_verbs: tuple[str, ...] = ()):
        self.engine, self.sampling = engine, sampling
        # ablations and paired rollouts: at most ``call_budget`` harness calls per episode (None: no bound), and
        # verbs switched off as an operator would (the session's disabled_verbs control); the prompt is unchanged
        self.harness_cap, self.call_budget = harness_cap, call_budget
        self.domain = get_domain(domain)
        self.bank = bank or {"entries": {}, "controls": {}}
        self.state = new_state(task=task, domain=domain, mode=mode, bank="memory",
                               initial_belief=self.domain.initial_belief(task), modules=modules,
                               harness_cap=harness_cap, max_steps=max_steps, transcript_chars=transcript_chars)
        self.state["belief"]["task_type"] = self.domain.task_type(task)
        self.state["controls"]["disabled_verbs"] = sorted(disabled_verbs)
        self.outcomes: list[StepOutcome] = []

    async def step(self, observation: str, admissible: list[str] | None,
                   won: bool | None = None) -> tuple[str, StepOutcome]:
        observed = observe(self.state, self.domain, observation, admissible, won)
        if self.call_budget is not None:   # this step's cap: what is left of the episode's budget
            left = max(0, self.call_budget - observed["budget"]["harness_calls"])
            observed["controls"] = {**observed["controls"], "harness_cap": min(self.harness_cap, left)}
        outcome = await run_step(observed, self.domain, self.engine, bank_entries=self.bank["entries"],
                                 bank_controls=self.bank.get("controls"), sampling=self.sampling)
        self.state = outcome.state
        self.outcomes.append(outcome)
        return outcome.action, outcome

    def evidence(self, won: bool) -> dict:
        return evidence_of(self.state, won)


class EnginePolicy:
    """Driver policy backed by an in-process engine; runs the engine's event loop in a background thread."""

    def __init__(self, engine: Engine, *, mode: str = "inline", bank: dict | None = None, harness_cap: int = 3,
                 max_steps: int | None = None, sampling: Sampling = Sampling(), transcript_chars: int | None = None,
                 call_budget: int | None = None, disabled_verbs: tuple[str, ...] = ()):
        self.engine, self.mode, self.bank = engine, mode, bank
        self.call_budget, self.disabled_verbs = call_budget, tuple(disabled_verbs)
        self.transcript_chars = transcript_chars  # the engine's context bounds the episode chat
        self.harness_cap, self.max_steps, self.sampling = harness_cap, max_steps, sampling
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.run(engine.start())
        self.agent: HarnessAgent | None = None
        self.evidence: list[dict] = []

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def reset(self, task: str, observation: str, admissible: list[str]) -> None:
        self.agent = HarnessAgent(self.engine, task, mode=self.mode, bank=self.bank, harness_cap=self.harness_cap,
                                  max_steps=self.max_steps, sampling=self.sampling,
                                  transcript_chars=self.transcript_chars, call_budget=self.call_budget,
                                  disabled_verbs=self.disabled_verbs)

    def act(self, observation: str, admissible: list[str], won: bool, done: bool) -> tuple[str, dict]:
        if done:
            self.evidence.append(self.agent.evidence(won))
            return "", {}
        action, out = self.run(self.agent.step(observation, admissible, won))
        return action, {"harness_calls": out.harness_calls,
                        "prompt_tokens": sum(t.prompt_tokens for t in out.turns),
                        "completion_tokens": sum(t.completion_tokens for t in out.turns)}

    def fork(self) -> EnginePolicy:
        """A twin for another episode played at the same time: same engine, event loop, mode, bank and sampling;
        its own episode state. The engine batches the twins' requests (see training.evaluate --concurrency)."""
        twin = copy.copy(self)
        twin.agent, twin.evidence = None, []
        return twin

    def close(self) -> None:
        self.run(self.engine.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
