"""The cost-aware episode reward (the study's formula plus an explicit harness cost).

    R = 10·won + λ_eff·1[won]·(T_max − |τ|)/T_max + λ_div(u)·R_div − 0.1·min(repeats, 10) − 0.1·invalid − C

* ``|τ|``: steps used (environment actions + harness calls: a harness call spends a step), ``T_max`` the budget;
* ``λ_div(u) = λ_max·(1 + cos(π·min(u, U)/U))/2`` — the diversity bonus anneals to 0 over ``U`` updates;
  ``R_div`` = share of the four verbs used at least once in the episode;
* ``repeats``: environment actions identical to the previous environment action, plus harness calls identical
  (verb and argument) to an earlier call of the same episode;
* ``invalid``: environment actions the game rejected ("Nothing happens.") plus unparseable outputs;
* ``C`` = Σ over harness calls of ``per_call + per_token·tokens + per_second·seconds`` (tokens = prompt + completion
  tokens of the call's turn). The study leaves "cost" implicit (a call spends a step); here it is explicit and both
  units are measured.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from service.harness.state import VERBS

REJECTED = "Nothing happens."


@dataclass(frozen=True)
class RewardConfig:
    """Weights of the reward terms."""

    win: float = field(default=10.0, metadata={"help": "reward of a won episode"})
    lambda_eff: float = field(default=1.0, metadata={"help": "weight of the efficiency term (won episodes)"})
    lambda_div_max: float = field(default=1.0, metadata={"help": "weight of the verb-diversity bonus at update 0"})
    div_anneal_updates: int = field(default=150, metadata={
        "help": "U: updates over which the verb-diversity bonus anneals to 0 (the study: 150); a short CPU run needs "
                "a U within its horizon or the bonus outweighs the cost term"})
    repeat_penalty: float = field(default=0.1, metadata={"help": "penalty per repeated action or harness call"})
    repeat_cap: int = field(default=10, metadata={"help": "repeats counted at most"})
    invalid_penalty: float = field(default=0.1, metadata={"help": "penalty per rejected action or unparseable output"})
    cost_per_call: float = field(default=0.05, metadata={"help": "explicit cost per harness call (reward units)"})
    cost_per_token: float = field(default=0.0, metadata={
        "help": "cost per token a harness call consumed (prompt + completion)"})
    cost_per_second: float = field(default=0.0, metadata={"help": "cost per second of generation a harness call took"})


def diversity_weight(update: int, cfg: RewardConfig) -> float:
    u = min(update, cfg.div_anneal_updates)
    return cfg.lambda_div_max * (1 + math.cos(math.pi * u / cfg.div_anneal_updates)) / 2


def count_repeats(env_actions: list[str], calls: list[dict]) -> int:
    repeats = sum(a == b for a, b in itertools.pairwise(env_actions))
    seen = set()
    for c in calls:
        key = (c["verb"], c.get("arg", ""))
        repeats += key in seen
        seen.add(key)
    return repeats


def harness_cost(calls: list[dict], cfg: RewardConfig) -> float:
    return sum(cfg.cost_per_call + cfg.cost_per_token * c.get("tokens", 0) + cfg.cost_per_second * c.get("seconds", 0.0)
               for c in calls)


def episode_reward(ep: dict, update: int, cfg: RewardConfig = RewardConfig()) -> dict:
    """``ep``: won, steps (|τ|), max_steps (T_max), env_actions, observations, calls [{verb, arg, tokens, seconds}],
    invalid_outputs. Returns every term and the total."""
    won = bool(ep["won"])
    t_max = max(1, ep["max_steps"])
    eff = cfg.lambda_eff * won * max(0.0, (t_max - ep["steps"]) / t_max)
    used = {c["verb"] for c in ep["calls"]}
    div = diversity_weight(update, cfg) * len(used & set(VERBS)) / len(VERBS)
    repeats = count_repeats(ep["env_actions"], ep["calls"])
    invalid = sum(o.strip() == REJECTED for o in ep.get("observations", [])) + ep.get("invalid_outputs", 0)
    cost = harness_cost(ep["calls"], cfg)
    terms = {"win": cfg.win * won, "efficiency": eff, "diversity": div,
             "repeat": -cfg.repeat_penalty * min(repeats, cfg.repeat_cap), "invalid": -cfg.invalid_penalty * invalid,
             "cost": -cost}
    return {**terms, "total": sum(terms.values()), "repeats": repeats, "invalid_count": invalid}
