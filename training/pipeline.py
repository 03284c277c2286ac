"""The default policy end to end: teacher -> base model -> SFT -> GRPO -> export -> evaluation.

    CPU:  python -m training.pipeline --out models/default-policy              # what `make policy` runs
    GPU:  python -m training.pipeline --preset gpu-qwen3-1.7b --base /models/Qwen3-1.7B --out runs/policy-1.7b

Every stage is its own module with its own config (``training.teacher``, ``model_init``, ``sft``, ``grpo``,
``export``, ``evaluate``); this file only chains them with the default settings below. Stages whose output already
exists are skipped (``--force`` reruns them), so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class PipelineConfig:
    """Defaults of the shipped CPU policy (see docs/training.md for why)."""

    train_games: int = 600                # generated train games (the benchmark's train split size)
    work: str = "runs/policy"             # intermediate outputs
    teacher_out: str = "data/teacher"
    teacher_shards: int = 2               # parallel expert collectors (one per core), then one render pass
    base: str = "smollm2-135m-instruct"   # packaged pretrained base (service.policy.pretrained); or "micro"/"pico"
                                          # ... for a from-scratch toy model (tests)
    sft_steps: int = 150                  # optimizer steps of `sft_batch` whole episodes each
    sft_modes: dict = field(default_factory=lambda: {"inline": 1.0, "always_on": 0.2, "env_only": 0.0})
                                          # share of each mode's teacher episodes: inline is what is served;
                                          # always_on is kept for the harness-token comparison
    lm_steps: int = 0                     # LM stage (loss on every token): only useful for from-scratch toys
    sft_lr: float = 3e-4
    sft_batch: int = 4
    sft_max_length: int = 4096            # tokens per episode
    lora_r: int = 64
    lora_from_layer: int = 12             # adapters on layers 12-29: the backward pass stops at layer 12
    bf16_autocast: bool = True            # on CPUs with avx512_bf16/AMX only (checked at run time)
    threads: int = 2                      # torch threads for SFT and GRPO
    grpo_updates: int = 0                 # 0: no GRPO stage (not yet run on the pretrained base; issue 12)
    grpo_group: int = 4
    grpo_games_per_update: int = 2
    grpo_max_env_steps: int = 30
    grpo_lr: float = 1e-4
    grpo_cost_per_call: float = 0.3
    grpo_div_anneal: int = 4              # U of the diversity bonus (the study: 150 updates; a 10-update CPU run
                                          # needs it inside its horizon or the bonus outweighs the cost term)
    eval_n: int | None = None             # games per split (None: all generated games)
    eval_max_steps: int = 50
    eval_kv_cache_gib: float = 2.0        # SmolLM2 fp32 keeps ~46 KB per token: 8 episodes of ~4k tokens need ~1.5 GiB
    eval_other_modes: list[str] = field(default_factory=lambda: ["always_on"])  # on valid_unseen, beside inline
    eval_other_modes_n: int | None = 40   # games for those modes (None: all); inline always plays every game
    eval_temperature: float = 0.0         # 0 = greedy; the serving default must match (EVOHARNESS_TEMPERATURE)
    valid_seen_games: int = 40
    out: str = "models/default-policy"
    remarks: str | None = "docs/policy_remarks.md"  # hand-written part of the card (limits, what was tried)
    stages: list[str] = field(default_factory=lambda: ["games", "teacher", "base", "sft", "grpo", "export", "eval"])


SIZES = ("pico", "nano", "micro", "small", "base")  # training.model_init's from-scratch sizes


def cpu_has_bf16() -> bool:
    """bf16 matmuls are native only with AVX512-BF16 or AMX; elsewhere they are emulated (~10x slower)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def sh(*args: str) -> None:
    print("+", " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", *args], check=True)


def sh_parallel(commands: list[list[str]]) -> None:
    """Run ``python -m`` commands side by side; fail if any fails."""
    procs = []
    for args in commands:
        print("+", " ".join(args), "&", flush=True)
        procs.append(subprocess.Popen([sys.executable, "-m", *args]))
    codes = [p.wait() for p in procs]
    if any(codes):
        raise subprocess.CalledProcessError(max(codes), commands[codes.index(max(codes))])


def run(cfg: PipelineConfig, force: bool = False) -> None:
    work = Path(cfg.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    def done(p) -> bool:
        return Path(p).exists() and not force

    if "games" in cfg.stages:
        sh("training.envs.alfworld.generate", "--split", "train", "--count", str(cfg.train_games))
        sh("training.envs.alfworld.generate", "--split", "valid_seen", "--count", str(cfg.valid_seen_games))
        sh("training.envs.alfworld.generate", "--split", "valid_unseen")
    if "teacher" in cfg.stages and not done(f"{cfg.teacher_out}/inline.jsonl"):
        teacher = ["training.teacher", "--games-dir", "data/alfworld/train", "--out", cfg.teacher_out]
        if cfg.teacher_shards > 1:
            sh_parallel([[*teacher, "--shard", f"{i}/{cfg.teacher_shards}"] for i in range(cfg.teacher_shards)])
            teacher.append("--render-only")
        sh(*teacher)
    pretrained = cfg.base not in SIZES
    if pretrained:
        from service.policy.pretrained import ensure_base
        base = str(ensure_base(cfg.base)) if "base" in cfg.stages else f"data/base/{cfg.base}"
    else:
        base = str(work / f"base-{cfg.base}")
        if "base" in cfg.stages and not done(base):
            sh("training.model_init", "--size", cfg.base, "--corpus", cfg.teacher_out, "--out", base)
    if "sft" in cfg.stages and not done(work / "sft" / "model"):
        sh("training.sft", "--base", base, "--data", cfg.teacher_out, "--out", str(work / "sft"),
           "--max-steps", str(cfg.sft_steps), "--lm-steps", str(cfg.lm_steps), "--lr", str(cfg.sft_lr),
           "--batch", str(cfg.sft_batch), "--modes", json.dumps(cfg.sft_modes), "--max-length", str(cfg.sft_max_length),
           "--threads", str(cfg.threads),
           *(["--lora", "--lora-r", str(cfg.lora_r), "--lora-from-layer", str(cfg.lora_from_layer)]
             if pretrained else []),
           *(["--bf16"] if cfg.bf16_autocast and cpu_has_bf16() else []))
    if "grpo" in cfg.stages and cfg.grpo_updates and not done(work / "grpo" / "model"):
        sh("training.grpo", "--model", str(work / "sft" / "model"), "--out", str(work / "grpo"),
           "--updates", str(cfg.grpo_updates), "--group", str(cfg.grpo_group),
           "--games-per-update", str(cfg.grpo_games_per_update), "--max-env-steps", str(cfg.grpo_max_env_steps),
           "--lr", str(cfg.grpo_lr), "--cost-per-call", str(cfg.grpo_cost_per_call),
           "--div-anneal-updates", str(cfg.grpo_div_anneal), "--threads", str(cfg.threads))
    final = work / "grpo" / "model" if (work / "grpo" / "model").exists() else work / "sft" / "model"
    if "export" in cfg.stages and pretrained and final == work / "sft" / "model":
        sh("training.export", "--model", base, "--adapter", str(work / "sft" / "adapter"), "--base-name", cfg.base,
           "--out", cfg.out, "--bank", f"{cfg.teacher_out}/bank.json", "--temperature", str(cfg.eval_temperature))
    elif "export" in cfg.stages:
        sh("training.export", "--model", str(final), "--out", cfg.out, "--bank", f"{cfg.teacher_out}/bank.json",
           "--temperature", str(cfg.eval_temperature))  # the policy is served as it was evaluated
    if "eval" in cfg.stages:
        runs = [("policy", Path(cfg.out), ["valid_seen", "valid_unseen"], ["inline"], cfg.eval_n),
                ("policy-modes", Path(cfg.out), ["valid_unseen"], cfg.eval_other_modes,
                 min(filter(None, [cfg.eval_n, cfg.eval_other_modes_n]), default=None))]
        if final != work / "sft" / "model":  # GRPO ran: its SFT checkpoint is the baseline
            runs.insert(0, ("sft", work / "sft" / "model", ["valid_seen", "valid_unseen"], ["inline"], cfg.eval_n))
        for label, model, splits, modes, n in runs:
            if not modes or (work / f"eval-{label}" / "eval.md").exists() and not force:
                continue
            sh("training.evaluate", "--model", str(model), "--split", *splits,
               "--mode", *modes, *(["--n", str(n)] if n else []),
               "--max-steps", str(cfg.eval_max_steps), "--bank", f"{cfg.teacher_out}/bank.json",
               "--temperature", str(cfg.eval_temperature), "--kv-cache-gib", str(cfg.eval_kv_cache_gib),
               "--out", str(work / f"eval-{label}"))
    (work / "pipeline.json").write_text(json.dumps({"config": asdict(cfg),
                                                    "seconds": round(time.perf_counter() - t0, 1)}, indent=1))
    if "export" in cfg.stages:
        sh("training.card", "--policy", cfg.out, "--work", str(work), "--teacher", cfg.teacher_out,
           *(["--remarks", cfg.remarks] if cfg.remarks and Path(cfg.remarks).exists() else []))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Train the default policy end to end.")
    ap.add_argument("--out", default="models/default-policy")
    ap.add_argument("--work", default="runs/policy")
    ap.add_argument("--base", default=PipelineConfig.base, help="packaged pretrained base, or a from-scratch size "
                    f"({', '.join(SIZES)})")
    ap.add_argument("--sft-steps", type=int, default=PipelineConfig.sft_steps)
    ap.add_argument("--lm-steps", type=int, default=PipelineConfig.lm_steps)
    ap.add_argument("--grpo-updates", type=int, default=PipelineConfig.grpo_updates)
    ap.add_argument("--eval-n", type=int, default=None, help="games per split (default: all generated)")
    ap.add_argument("--stages", nargs="+", default=None)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    cfg = PipelineConfig(out=args.out, work=args.work, base=args.base, sft_steps=args.sft_steps, lm_steps=args.lm_steps,
                         grpo_updates=args.grpo_updates, eval_n=args.eval_n)
    if args.stages:
        cfg.stages = args.stages
    run(cfg, args.force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
