"""python -m training.grpo --model runs/sft/model --out runs/grpo

Cost-aware multi-turn GRPO from the SFT checkpoint, episodes driven through the service's harness runtime. Settings:
``GRPORunConfig`` with its ``RewardConfig`` (``--help`` lists them; ``--config FILE.json`` reads them from a file, see
``training.cli``).

    CPU:  python -m training.grpo --model runs/sft/model --games data/alfworld/train --out runs/grpo --updates 8
    GPU:  python -m training.grpo --model runs/sft-lora/model --games data/alfworld/train --out runs/grpo-gpu \
              --updates 150 --games-per-update 16 --group 8 --max-env-steps 70 --lr 1e-6 --beta 0.01

What it is, exactly (per-turn GRPO over episode returns):

1. Rollouts. For each of ``games_per_update`` train games, ``group`` episodes are played by
   ``training.agent.EnginePolicy`` (``observe`` → ``run_step``: the one renderer, grammar and parser) on
   ``training.envs.alfworld`` through the episode driver, sampling at ``temperature`` from the *current* weights via
   :class:`training.hf_engine.HFEngine` (xgrammar-constrained, as vLLM serves). The Experience bank evolves between
   updates by ``service.bank.evolver.consolidate``, as in the service.
2. Reward. :func:`training.reward.episode_reward` — the study's formula plus an explicit cost per harness call.
3. Advantage. Group-relative: ``A = (R − mean_group) / (std_group + ε)`` per game; every turn of an episode (harness
   and environment turns alike) gets its episode's advantage.
4. Loss. Token-level (DAPO-style, TRL's default) policy gradient on each turn's completion tokens given that turn's
   own re-rendered prompt, plus ``beta``·KL to the frozen SFT reference (k3 estimator, as TRL). One optimizer step per
   update on fresh on-policy samples, so the PPO ratio is 1 and clipping is inactive.

Why not TRL ``GRPOTrainer``: its multi-turn paths (``rollout_func`` with ``env_mask``, ``environment_factory``) train
one *growing* token sequence per rollout (prompt + completion + tool output appended). Our prompts are re-rendered
every turn (history window, Plan panel, last harness result, fresh admissible list), so an episode is a list of
(prompt, completion) pairs, not one sequence; concatenating them would train the model on contexts it never sees
in serving. This module implements the same objective over those pairs.

Logged per update (``grpo_log.jsonl`` + ``grpo_curves.png``): reward, success, harness calls/episode, tokens/episode
(all turns), harness tokens/episode, steps, KL, loss.
"""

from __future__ import annotations

import copy
import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from training import cli
from training.reward import RewardConfig, episode_reward


@dataclass
class GRPORunConfig:
    """GRPO settings (the reward's weights are ``reward``'s fields, flat flags on the command line)."""

    model: str = field(metadata={"help": "SFT checkpoint (merged)"})
    games: str = field(default="data/alfworld/train", metadata={"help": "folder of train games"})
    out: str = field(default="runs/grpo", metadata={"help": "output folder"})
    updates: int = field(default=8, metadata={"help": "optimizer updates"})
    games_per_update: int = field(default=2, metadata={"help": "prompts (games) per update; the study: 16"})
    group: int = field(default=4, metadata={"help": "rollouts per game (GRPO group size); the study: 8"})
    max_env_steps: int = field(default=25, metadata={
        "help": "environment step budget per episode (the study: 70 on GPU)"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature of the rollouts"})
    lr: float = field(default=1e-5, metadata={"help": "learning rate (the study: 1e-6 for Qwen3-8B LoRA; tiny models "
                                                      "need more)"})
    beta: float = field(default=0.01, metadata={"help": "weight of the KL to the SFT reference (the study: 0.01)"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping norm"})
    mode: str = field(default="inline", metadata={"help": "harness mode of the rollouts"})
    bank: str | None = field(default="data/teacher/bank.json", metadata={
        "help": "Experience bank to start from (the teacher's); none: empty"})
    harness_cap: int = field(default=3, metadata={"help": "harness calls allowed per step"})
    reward: RewardConfig = field(default_factory=RewardConfig, metadata={"help": "reward weights"})
    seed: int = field(default=0, metadata={"help": "seed"})
    threads: int = field(default=1, metadata={"help": "torch threads"})


# ------------------------------------------------------------------------------------------------ rollouts
def play(policy, env, game, engine) -> dict:
    """One episode; returns the reward inputs plus the per-turn training records."""
    from training.envs.alfworld.episode import play_episode

    engine.records = []
    rec = play_episode(env, policy, game, keep_transcript=True)
    turns = [t for o in policy.agent.outcomes for t in o.turns]
    calls = [{"verb": t.verb, "arg": t.arg, "tokens": t.prompt_tokens + t.completion_tokens, "seconds": t.seconds}
             for t in turns if t.kind == "harness"]
    state = policy.agent.state
    return {"won": rec["won"], "steps": state["budget"]["used"], "max_steps": env.max_steps,
            "env_actions": [o.action for o in policy.agent.outcomes],
            "observations": [s["observation"] for s in rec["transcript"]],
            "calls": calls, "invalid_outputs": sum(o.invalid_outputs for o in policy.agent.outcomes),
            "tokens": sum(t.prompt_tokens + t.completion_tokens for t in turns),
            "harness_tokens": sum(c["tokens"] for c in calls), "records": list(engine.records),
            "task_type": rec["task_type"], "game": rec["game"]}


def advantages(rewards: list[float], eps: float = 1e-4) -> list[float]:
    n = len(rewards)
    mean = sum(rewards) / n
    std = (sum((r - mean) ** 2 for r in rewards) / n) ** 0.5
    return [(r - mean) / (std + eps) for r in rewards]


# ------------------------------------------------------------------------------------------------ loss
def turn_logps(model, prompt_ids: list[int], completion_ids: list[int]):
    import torch

    ids = torch.tensor([prompt_ids + completion_ids], device=model.device)
    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1].float()
    target = torch.tensor(completion_ids, device=model.device)[:, None]
    return torch.log_softmax(logits, -1).gather(1, target)[:, 0]


def grpo_loss(model, ref, samples: list[tuple[dict, float]], beta: float):
    """samples: (engine record, advantage). Token-level mean over all completion tokens of the batch."""
    import torch

    total_tokens = sum(len(r["completion_ids"]) for r, _ in samples) or 1
    loss, kl_sum = 0.0, 0.0
    for rec, adv in samples:
        logp = turn_logps(model, rec["prompt_ids"], rec["completion_ids"])
        ratio = torch.exp(logp - logp.detach())          # = 1, carries the gradient
        term = -(ratio * adv).sum()
        if beta and ref is not None:
            with torch.no_grad():
                ref_logp = turn_logps(ref, rec["prompt_ids"], rec["completion_ids"])
            d = ref_logp - logp
            kl = (torch.exp(d) - d - 1).sum()
            term = term + beta * kl
            kl_sum += float(kl)
        (term / total_tokens).backward()                  # accumulate per turn to bound memory
        loss += float(term)
    return loss / total_tokens, kl_sum / total_tokens


# ------------------------------------------------------------------------------------------------ loop
def run(cfg: GRPORunConfig) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from service.bank.evolver import consolidate, new_bank
    from service.policy.turns import Sampling
    from training.agent import EnginePolicy
    from training.envs.alfworld.env import AlfWorldEnv
    from training.envs.alfworld.paths import list_games
    from training.hf_engine import HFEngine
    from training.plots import plot_curves

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rnd = random.Random(cfg.seed)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(cfg.model)
    model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=torch.float32)
    if torch.cuda.is_available():
        model = model.to("cuda", dtype=torch.bfloat16)
    ref = copy.deepcopy(model).eval() if cfg.beta else None
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    engine = HFEngine(model, tok, model_id="grpo-policy", seed=cfg.seed)
    bank = json.loads(Path(cfg.bank).read_text()) if cfg.bank and Path(cfg.bank).exists() else new_bank()
    games = [g for g in list_games(cfg.games) if not g.name.startswith(".")]
    env = AlfWorldEnv(max_steps=cfg.max_env_steps)
    log, log_path = [], out / "grpo_log.jsonl"
    log_path.write_text("")
    for update in range(cfg.updates):
        started = time.perf_counter()
        episodes, samples = [], []
        for game in rnd.sample(games, min(cfg.games_per_update, len(games))):
            group = []
            for _ in range(cfg.group):
                policy = EnginePolicy(engine, mode=cfg.mode, bank=bank, harness_cap=cfg.harness_cap,
                                      sampling=Sampling(temperature=cfg.temperature, max_invalid=2))
                try:
                    ep = play(policy, env, game, engine)
                finally:
                    policy.close()
                ep["reward"] = episode_reward(ep, update, cfg.reward)
                ep["evidence"] = policy.evidence[-1] if policy.evidence else None
                group.append(ep)
            for ep, adv in zip(group, advantages([e["reward"]["total"] for e in group])):
                samples += [(r, adv) for r in ep["records"]]
            episodes += group
        model.train()
        opt.zero_grad()
        loss, kl = grpo_loss(model, ref, [s for s in samples if s[1] != 0.0], cfg.beta)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm))
        opt.step()
        model.eval()
        evidence = [dict(e["evidence"], session_id=f"{update:04d}-{i:03d}") for i, e in enumerate(episodes)
                    if e["evidence"]]
        bank, _ = consolidate(bank, evidence, update + 1)
        n = len(episodes)
        row = {"update": update, "reward": sum(e["reward"]["total"] for e in episodes) / n,
               "success": sum(e["won"] for e in episodes) / n,
               "harness_calls_per_episode": sum(len(e["calls"]) for e in episodes) / n,
               "tokens_per_episode": sum(e["tokens"] for e in episodes) / n,
               "harness_tokens_per_episode": sum(e["harness_tokens"] for e in episodes) / n,
               "steps_per_episode": sum(e["steps"] for e in episodes) / n,
               "loss": loss, "kl": kl, "grad_norm": grad_norm, "turns": len(samples),
               "bank_entries": len(bank["entries"]), "seconds": round(time.perf_counter() - started, 1)}
        log.append(row)
        with log_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
        plot_curves(log, ["reward", "success", "harness_calls_per_episode", "tokens_per_episode"],
                    out / "grpo_curves.png", "cost-aware GRPO")
        model.save_pretrained(out / "model", safe_serialization=True)
        tok.save_pretrained(out / "model")
    env.close()
    (out / "bank.json").write_text(json.dumps(bank, indent=1))
    (out / "grpo_config.json").write_text(json.dumps(asdict(cfg), indent=1))
    return log


def parse_args(argv: list[str] | None = None) -> GRPORunConfig:
    return cli.parse(GRPORunConfig, argv, __doc__)


def main(argv: list[str] | None = None) -> int:
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
