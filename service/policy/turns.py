"""The turn loop of one environment step: harness turns until the policy emits an env action.

Pure except for the engine call, so the service (over Redis) and training/evaluation
(in memory) run exactly the same loop.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from service.domains.base import Domain
from service.harness import allowed_verbs, apply_env_action, apply_verb
from service.harness.experience import top_k_entries
from service.harness.ops import HarnessError, remaining_budget
from service.policy.engines.base import Engine, GenerationRequest
from service.policy.grammar import max_tokens_for, response_regex
from service.policy.parse import Decision, ParseError, parse
from service.policy.render import append_turn, harness_result_message, pending_messages, render_prompt


class PolicyOutputError(RuntimeError):
    """The engine kept producing unparseable output (only possible without a grammar-capable engine)."""


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    max_invalid: int = 2       # unparseable outputs tolerated per step before giving up
    experience_k: int = 3      # entries in the always_on Experience panel and per recall


@dataclass
class Turn:
    kind: str                  # "harness" | "env"
    verb: str | None
    arg: str | None            # verb argument, or the env action
    reason: str
    result: str | None         # harness result text; None for env turns
    state: dict                # state after this turn
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    model: str
    prompt_hash: str
    raw: str = ""

    def public(self) -> dict:
        return {"kind": self.kind, "verb": self.verb, "arg": self.arg, "reason": self.reason, "result": self.result}


@dataclass
class StepOutcome:
    action: str
    turns: list[Turn]
    invalid_outputs: int = 0
    prompts: list[str] = field(default_factory=list)

    @property
    def state(self) -> dict:
        return self.turns[-1].state

    @property
    def harness_calls(self) -> int:
        return sum(t.kind == "harness" for t in self.turns)


@dataclass(frozen=True)
class TurnInput:
    """Everything one policy turn is generated from: the prompt, the allowed verbs and the output grammar."""

    prompt: str
    verbs: list[str]
    regex: str
    max_tokens: int
    pending: list[dict] = field(default_factory=list)  # messages this turn adds to the transcript before its response


def check_can_step(state: dict) -> None:
    if state["status"] != "active":
        raise HarnessError(f"session is {state['status']}")
    rem = remaining_budget(state)
    if rem is not None and rem < 1:
        raise HarnessError(f"step budget of {state['budget']['max_steps']} is spent")


def prepare_turn(state: dict, bank_entries: dict, bank_controls: dict | None, experience_k: int = 3) -> TurnInput:
    """The prompt and constraint of the next turn. Teacher data (training) is rendered with this too."""
    verbs = allowed_verbs(state, bank_controls)
    panel = []
    if state["mode"] == "always_on" and state["modules"]["experience"]:
        panel = top_k_entries(bank_entries, state["task"], experience_k)
    pending = pending_messages(state, panel)
    return TurnInput(
        prompt=render_prompt(state, pending),
        verbs=verbs,
        regex=response_regex(state["admissible"], verbs),
        max_tokens=max_tokens_for(state["admissible"], verbs),
        pending=pending,
    )


def apply_decision(state: dict, decision: Decision, domain: Domain, bank_entries: dict, turn: TurnInput,
                   experience_k: int = 3) -> tuple[dict, str | None]:
    """Apply a parsed decision of `turn`: a harness verb (returns its result) or the env action (result None).

    The transcript grows by the turn's pending messages, the response and (harness) the result, so the next
    prompt extends this one."""
    if decision.kind == "harness":
        s, result = apply_verb(state, domain, decision.verb, decision.arg, bank_entries, recall_k=experience_k)
        return append_turn(s, turn.pending, decision.reason, decision.action,
                           harness_result_message(decision.verb, decision.arg, result)), result
    s = apply_env_action(state, decision.action)
    return append_turn(s, turn.pending, decision.reason, decision.action, None), None


async def run_step(
    state: dict,
    domain: Domain,
    engine: Engine,
    *,
    bank_entries: dict | None = None,
    bank_controls: dict | None = None,
    sampling: Sampling = Sampling(),
    affinity_key: str | None = None,
) -> StepOutcome:
    """`state` must already hold this step's observation (see `harness.observe`). `affinity_key` (the session id)
    keeps a session's generations on one engine server where there are several (prefix-cache reuse)."""
    check_can_step(state)
    entries = bank_entries or {}
    s, turns, prompts, invalid = state, [], [], 0
    while True:
        ti = prepare_turn(s, entries, bank_controls, sampling.experience_k)
        prompts.append(ti.prompt)
        gen = await engine.generate(GenerationRequest(
            prompt=ti.prompt, regex=ti.regex, max_tokens=ti.max_tokens,
            temperature=sampling.temperature, top_p=sampling.top_p, seed=sampling.seed, affinity_key=affinity_key,
        ))
        try:
            d = parse(gen.text, s["admissible"], ti.verbs)
        except ParseError as err:
            invalid += 1
            if invalid > sampling.max_invalid:
                raise PolicyOutputError(f"{invalid} unparseable outputs in one step; last: {gen.text[:200]!r}") from err
            continue
        phash = hashlib.sha256(ti.prompt.encode()).hexdigest()[:16]
        common = dict(prompt_tokens=gen.prompt_tokens, completion_tokens=gen.completion_tokens,
                      seconds=gen.seconds, model=gen.model, prompt_hash=phash, raw=gen.text)
        s, result = apply_decision(s, d, domain, entries, ti, sampling.experience_k)
        turns.append(Turn(d.kind, d.verb, d.action if d.kind == "env" else d.arg, d.reason, result, s, **common))
        if d.kind == "env":
            return StepOutcome(action=d.action, turns=turns, invalid_outputs=invalid, prompts=prompts)
