"""Supervised fine-tuning on teacher data with TRL ``SFTTrainer`` (completion-only loss).

    CPU:  python -m training.sft --base runs/base-nano --data data/teacher --out runs/sft --max-steps 600
    GPU:  python -m training.sft --base /models/Qwen3-1.7B --lora --data data/teacher --out runs/sft-lora \
              --lr 1e-5 --epochs 4 --batch 8 --bf16

Data: the teacher's ``{prompt, completion}`` rows (prompt = the renderer's exact ChatML text, completion =
``<think>…</think><action>…</action><|im_end|>``) — TRL's prompt-completion format, so the loss covers the
completion (and its end-of-turn token) only. Modes are mixed (``SFTConfig.modes``) so one model serves all three.

Optional LM stage (``lm_steps``): language-model pretraining on whole transcripts (prompt + completion, loss on every
token) before SFT — it teaches the model the scene text it must copy names from.

Full fine-tune for tiny from-scratch models; ``lora=True`` wraps a pretrained model with peft LoRA (r=64, α=128,
all linear layers, as in the study). Constrained accuracy (``training.constrained_eval``) is measured at the end on
held-out teacher turns with the serving grammar.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class SFTRunConfig:
    """SFT settings (TRL SFTConfig is built from these)."""

    base: str = "runs/base-nano"            # base model folder (from training.model_init or a pretrained HF folder)
    data: str = "data/teacher"              # teacher folder with <mode>.jsonl
    out: str = "runs/sft"
    modes: dict = field(default_factory=lambda: {"inline": 1.0, "always_on": 0.5, "env_only": 0.5})  # share kept
    max_steps: int = 600                    # optimizer steps of the SFT stage
    lm_steps: int = 0                       # optional LM pretraining steps on full transcripts before SFT
    lr: float = 2e-3                        # from-scratch tiny models need a high lr; LoRA on Qwen3: 1e-5..1e-4
    batch: int = 8
    grad_accum: int = 1
    max_length: int = 640                   # prompt + completion tokens
    warmup: float = 0.05
    lora: bool = False                      # peft LoRA instead of full fine-tune (pretrained bases)
    lora_r: int = 64
    lora_alpha: int = 128
    bf16: bool = False
    holdout_games: int = 4                  # games held out for constrained accuracy
    eval_turns: int = 60
    seed: int = 0
    threads: int = 1                        # torch threads (1 is fastest on a shared 2-core box)
    focus_steps: int = 0                    # extra SFT steps on a mix where decision turns are upsampled
    focus_lr: float = 1e-3
    focus_upsample: dict = field(default_factory=lambda: dict(FOCUS_UPSAMPLE))  # action prefix -> copies


# Decision turns are rare: an episode has 1-4 of them (take / put / clean / heat / cool / use) among ~20 navigation
# turns. Measured: after 800 SFT steps the policy walked past visible targets, e.g. "open drawer 2" -> "... you see a
# cloth 2" -> "close drawer 2" (the frequent continuation) instead of "take cloth 2 from drawer 2".
FOCUS_UPSAMPLE = {"take ": 4, "move ": 3, "clean ": 3, "heat ": 3, "cool ": 3, "use ": 3}


def action_of(completion: str) -> str:
    start = completion.find("<action>")
    end = completion.find("</action>")
    return completion[start + len("<action>"):end] if 0 <= start < end else ""


def upsampled(rows: list[dict], factors: dict, seed: int = 0) -> list[dict]:
    """Each row repeated by the factor of the first action prefix it starts with (1 if none), shuffled."""
    out = []
    for r in rows:
        act = action_of(r["completion"])
        out += [r] * next((k for p, k in factors.items() if act.startswith(p)), 1)
    random.Random(seed).shuffle(out)
    return out


def load_rows(cfg: SFTRunConfig) -> tuple[list[dict], list[dict]]:
    rnd = random.Random(cfg.seed)
    train, held = [], []
    for mode, share in cfg.modes.items():
        path = Path(cfg.data) / f"{mode}.jsonl"
        if not path.exists() or share <= 0:
            continue
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        games = sorted({r["game"] for r in rows})
        held_games = set(games[-cfg.holdout_games:]) if len(games) > cfg.holdout_games else set()
        for r in rows:
            if r["game"] in held_games:
                held.append(r)
            elif rnd.random() < share:
                train.append(r)
    return train, held


def _trainer(cfg: SFTRunConfig, model, tok, rows: list[dict], out: Path, steps: int, completion_only: bool):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    if completion_only:
        data = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows])
    else:
        data = Dataset.from_list([{"text": r["prompt"] + r["completion"]} for r in rows])
    args = SFTConfig(output_dir=str(out), max_steps=steps, learning_rate=cfg.lr, per_device_train_batch_size=cfg.batch,
                     gradient_accumulation_steps=cfg.grad_accum, max_length=cfg.max_length, warmup_steps=cfg.warmup,
                     lr_scheduler_type="cosine", logging_steps=10, save_steps=max(50, steps // 4),
                     save_total_limit=1, report_to=[], use_cpu=not cfg.bf16, bf16=cfg.bf16,
                     gradient_checkpointing=False, completion_only_loss=completion_only, seed=cfg.seed,
                     dataloader_num_workers=0, dataset_num_proc=1, packing=False, loss_type="nll")
    return SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok)


def run(cfg: SFTRunConfig) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(cfg.base)
    model = AutoModelForCausalLM.from_pretrained(cfg.base, dtype=torch.bfloat16 if cfg.bf16 else torch.float32)
    if cfg.lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, target_modules="all-linear",
                                                 task_type="CAUSAL_LM"))
    train, held = load_rows(cfg)
    logs = []
    if cfg.lm_steps:
        t = _trainer(cfg, model, tok, train, out / "lm", cfg.lm_steps, completion_only=False)
        t.train()
        logs += [{"stage": "lm", **h} for h in t.state.log_history]
    if cfg.max_steps:
        t = _trainer(cfg, model, tok, train, out / "ckpt", cfg.max_steps, completion_only=True)
        t.train()
        logs += [{"stage": "sft", **h} for h in t.state.log_history]
        model = t.model
    if cfg.focus_steps:
        focus_cfg = SFTRunConfig(**{**asdict(cfg), "lr": cfg.focus_lr})
        t = _trainer(focus_cfg, model, tok, upsampled(train, cfg.focus_upsample, cfg.seed), out / "focus",
                     cfg.focus_steps, completion_only=True)
        t.train()
        logs += [{"stage": "focus", **h} for h in t.state.log_history]
        model = t.model
    if cfg.lora:
        model.save_pretrained(out / "adapter")
        model = model.merge_and_unload()
    model.save_pretrained(out / "model", safe_serialization=True)
    tok.save_pretrained(out / "model")
    from training.constrained_eval import constrained_accuracy
    acc = constrained_accuracy(model, tok, held, cfg.eval_turns, seed=cfg.seed)
    report = {"config": asdict(cfg), "train_rows": len(train), "heldout_rows": len(held),
              "seconds": round(time.perf_counter() - started, 1), "constrained_eval": acc, "log": logs}
    (out / "sft_report.json").write_text(json.dumps(report, indent=1))
    from training.plots import plot_sft
    plot_sft(logs, out / "sft_loss.png")
    print(json.dumps({k: v for k, v in report.items() if k != "log"}, indent=1))
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="SFT on teacher data (TRL SFTTrainer, completion-only loss).")
    ap.add_argument("--base", required=True)
    ap.add_argument("--data", default="data/teacher")
    ap.add_argument("--out", default="runs/sft")
    ap.add_argument("--max-steps", type=int, default=600)
    ap.add_argument("--lm-steps", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=640)
    ap.add_argument("--lora", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--eval-turns", type=int, default=60)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--focus-steps", type=int, default=0, help="extra steps with decision turns upsampled "
                    "(FOCUS_UPSAMPLE); with --max-steps 0 --lm-steps 0 only this stage runs (resume a checkpoint)")
    ap.add_argument("--focus-lr", type=float, default=1e-3)
    args = ap.parse_args(argv)
    run(SFTRunConfig(base=args.base, data=args.data, out=args.out, max_steps=args.max_steps, lm_steps=args.lm_steps,
                     lr=args.lr, batch=args.batch, max_length=args.max_length, lora=args.lora, bf16=args.bf16,
                     eval_turns=args.eval_turns, threads=args.threads, focus_steps=args.focus_steps,
                     focus_lr=args.focus_lr))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
