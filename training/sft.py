"""python -m training.sft --base data/base/smollm2-135m-instruct --lora --lora-from-layer 12 --data data/teacher

Supervised fine-tuning on teacher episodes with TRL ``SFTTrainer``: one sequence per episode, loss on the policy's
turns only. Settings: ``SFTRunConfig`` (``--help`` lists them; ``--config FILE.json`` reads them from a file, see
``training.cli``).

    CPU:  python -m training.sft --base data/base/smollm2-135m-instruct --data data/teacher --out runs/sft \
              --lora --lora-from-layer 14 --lr 3e-4 --max-steps 300
    GPU:  python -m training.sft --base /models/Qwen3-1.7B --lora --data data/teacher --out runs/sft-lora \
              --lr 1e-5 --max-steps 4000 --bf16

Data: the teacher's per-turn rows (``training.teacher``). A prompt is the episode so far (``service.policy.render``),
so the last turn's prompt plus its completion holds every turn of the episode; each row's completion is a span of
that text. We tokenize the whole episode once and mark the tokens of every completion span (``<think>…</think>
<action>…</action><|im_end|>``) for the loss: one forward/backward trains all turns of an episode, where per-turn
rows would re-read the same history about once per turn (measured ~10x the tokens). TRL gets the pre-tokenized
``input_ids`` + ``completion_mask`` and computes the LM head only where the loss is (its fused head).

Where this departs from the study (LoRA r=64 α=128 on all linear layers of Qwen3-8B, lr 1e-5, 4 epochs):
``lora_from_layer`` puts the adapters on the upper layers only, so the backward pass stops there (on a 2-core CPU
the lower layers' backward is most of the cost; see docs/training.md), and the lr is higher (small model, few steps).

Optional LM stage (``lm_steps``; for tiny from-scratch models): loss on every token of the episodes first.
Constrained accuracy (``training.constrained_eval``) is measured at the end on held-out turns with the serving grammar.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from training import cli

# every linear layer of a Llama/Qwen3 decoder block
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class SFTRunConfig:
    """SFT settings (TRL's SFTConfig is built from these)."""

    base: str = field(default="runs/base-nano", metadata={"help": "base model folder (HF)"})
    data: str = field(default="data/teacher", metadata={"help": "teacher folder with <mode>.jsonl"})
    out: str = field(default="runs/sft", metadata={"help": "output folder"})
    modes: dict = field(default_factory=lambda: {"inline": 1.0, "always_on": 0.25, "env_only": 0.25},
                        metadata={"help": "share of each mode's episodes kept (JSON)"})
    max_steps: int = field(default=300, metadata={"help": "optimizer steps"})
    lm_steps: int = field(default=0, metadata={"help": "LM steps (loss on every token) before SFT"})
    lr: float = field(default=3e-4, metadata={"help": "peak learning rate (cosine)"})
    batch: int = field(default=4, metadata={"help": "episodes per optimizer step (gradient accumulation)"})
    max_length: int = field(default=4096, metadata={"help": "tokens per episode (longer ones are cut at the end)"})
    warmup: float = field(default=0.05, metadata={"help": "warmup share of the steps"})
    lora: bool = field(default=False, metadata={"help": "peft LoRA instead of a full fine-tune"})
    lora_r: int = field(default=64, metadata={"help": "LoRA rank"})
    lora_alpha: int = field(default=128, metadata={"help": "LoRA alpha"})
    lora_from_layer: int = field(default=0, metadata={"help": "first decoder layer with adapters"})
    bf16: bool = field(default=False, metadata={
        "help": "bf16 (a GPU; or a CPU where training.hardware.bf16_autocast_pays() says so)"})
    holdout_games: int = field(default=4, metadata={"help": "games held out for constrained accuracy"})
    holdout_data: str | None = field(default=None, metadata={
        "help": "teacher folder whose games are all held out (its inline expert turns are the held-out turns, and "
                "none of data's games is held out): for a stage whose own games an earlier stage trained on"})
    replay_data: list[str] = field(default_factory=list, metadata={
        "help": "more teacher folders whose episodes are trained on beside data's, at the same mode shares (none of "
                "their games is held out): a continued adapter rehearses what it learned before"})
    eval_turns: int = field(default=60, metadata={"help": "held-out turns decoded under the grammar"})
    seed: int = field(default=0, metadata={"help": "seed"})
    threads: int = field(default=2, metadata={"help": "torch threads"})
    save_steps: int = field(default=50, metadata={"help": "checkpoint every N steps (resumable)"})
    init_adapter: str | None = field(default=None, metadata={
        "help": "continue training this LoRA adapter folder (a DAgger round) instead of a fresh one"})
    train_from_layer: int = field(default=0, metadata={
        "help": "train only the adapters of this layer and above (the others stay as they are, and the backward "
                "pass stops there: a round on top of a trained adapter costs about half)"})
    dagger_cap: int = field(default=0, metadata={
        "help": "sequences kept per DAgger episode, the first ones (one per state where the learner erred; 0: all)"})
    sources: dict = field(default_factory=dict, metadata={
        "help": "share of each trajectory source's sequences kept (JSON, e.g. {\"dagger\": 1.0, \"search\": 0.3}); "
                "sources not named are dropped; all kept when empty"})


def episodes_of(rows: list[dict]) -> list[dict]:
    """Group per-turn rows (in file order) into sequences: ``{"text", "spans", "game", "mode"}``.

    A row continues the current sequence when its prompt extends the sequence so far; otherwise (another game, or a
    transcript the renderer had to shorten) it starts a new one."""
    seqs: list[dict] = []
    for r in rows:
        cur = seqs[-1] if seqs else None
        full = r["prompt"] + r["completion"]
        span = (len(r["prompt"]), len(full))
        source = r.get("source", "search")
        if cur and (cur["game"], cur["mode"], cur["source"]) == (r["game"], r["mode"], source) \
                and r["prompt"].startswith(cur["text"]):
            cur["text"] = full
            cur["spans"].append(span)
        else:
            seqs.append({"text": full, "spans": [span], "game": r["game"], "mode": r["mode"], "source": source})
    return seqs


def tokenize_episode(tok, ep: dict, max_length: int, lm: bool = False, with_spans: bool = False) -> dict:
    """input_ids and completion_mask (1 on tokens inside a completion span; every token with ``lm``); with
    ``with_spans`` also span_index (the completion span each token lies in, -1 outside them: GRPO's per-turn credit)."""
    enc = tok(ep["text"], add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"][:max_length], enc["offset_mapping"][:max_length]
    mask, index, j, spans = [], [], 0, ep["spans"]
    for s, e in offsets:
        while j < len(spans) and spans[j][1] <= s:
            j += 1
        inside = j < len(spans) and spans[j][0] <= s and e <= spans[j][1]
        mask.append(1 if lm or inside else 0)
        index.append(j if inside else -1)
    return {"input_ids": ids, "completion_mask": mask, **({"span_index": index} if with_spans else {})}


def load_rows(cfg: SFTRunConfig) -> tuple[list[dict], list[dict]]:
    """(train rows, held-out rows): the last ``holdout_games`` games of each mode are held out (or, with
    ``holdout_data``, that folder's inline episodes are); a share of the other games' episodes is kept per mode, and
    the same share of each ``replay_data`` folder's."""
    rnd = random.Random(cfg.seed)
    train, held = [], []
    if cfg.holdout_data:
        rows = map(json.loads, (Path(cfg.holdout_data) / "inline.jsonl").read_text().splitlines())
        held = [r for r in rows if r.get("source", "search") != "dagger"]
    for mode, share in cfg.modes.items():
        path = Path(cfg.data) / f"{mode}.jsonl"
        if not path.exists() or share <= 0:
            continue
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        games = sorted({r["game"] for r in rows})
        n_held = 0 if cfg.holdout_data else cfg.holdout_games
        held_games = set(games[-n_held:]) if 0 < n_held < len(games) else set()
        kept = {g for g in games if g not in held_games and rnd.random() < share}
        for r in rows:
            if r["game"] in held_games:
                if r.get("source", "search") != "dagger":   # held-out turns stay the expert's own states
                    held.append(r)
            elif r["game"] in kept:
                train.append(r)
        for folder in cfg.replay_data:
            path = Path(folder) / f"{mode}.jsonl"
            rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
            kept = {g for g in sorted({r["game"] for r in rows}) if rnd.random() < share}
            train += [r for r in rows if r["game"] in kept]
    return train, held


def select_sources(eps: list[dict], shares: dict, seed: int = 0, dagger_cap: int = 0) -> list[dict]:
    """Keep a share of each source's sequences (``SFTRunConfig.sources``; all of them when ``shares`` is empty), and
    of a DAgger episode only its first ``dagger_cap`` sequences (0: all).

    A DAgger episode is split into one sequence per state where the learner's action differed from the expert's
    label (``episodes_of``); a learner stuck in a loop repeats the same mistake many times, and each sequence re-reads
    the whole history, so the first few carry the lesson at a fraction of the tokens."""
    if dagger_cap:
        seen: dict[tuple, int] = {}
        capped = []
        for e in eps:
            if e["source"] == "dagger":
                key = (e["game"], e["mode"])
                seen[key] = seen.get(key, 0) + 1
                if seen[key] > dagger_cap:
                    continue
            capped.append(e)
        eps = capped
    if not shares:
        return eps
    rnd = random.Random(seed + 1)
    return [e for e in eps if rnd.random() < float(shares.get(e["source"], 0.0))]


def _score_loss_positions_only() -> None:
    """Departure from TRL's defaults: its fused LM head (``trl.trainer.utils.add_fused_lm_head``) scores only the
    positions that carry a label on Triton devices, and every position elsewhere, because on fixed-shape devices a
    varying count of positions means a recompile. A CPU runs eager, so there is nothing to recompile, and here only
    the policy's turns carry labels (about 29 % of an episode's tokens): scoring those alone skips most of the 49k-way
    vocabulary projection, forward and backward, and gives the same loss."""
    import torch
    from trl.trainer import utils as trl_utils

    if not torch.cuda.is_available() and hasattr(trl_utils, "_use_triton"):
        trl_utils._use_triton = lambda device: True   # read only by the fused head's `compact` choice


def _trainer(cfg: SFTRunConfig, model, tok, data, out: Path, steps: int, peft_config=None):
    from trl import SFTConfig, SFTTrainer

    _score_loss_positions_only()

    args = SFTConfig(output_dir=str(out), max_steps=steps, learning_rate=cfg.lr, per_device_train_batch_size=1,
                     gradient_accumulation_steps=cfg.batch, max_length=cfg.max_length, warmup_steps=cfg.warmup,
                     lr_scheduler_type="cosine", logging_steps=5, save_steps=cfg.save_steps, save_total_limit=1,
                     report_to=[], use_cpu=not _has_gpu(), bf16=cfg.bf16, gradient_checkpointing=False,
                     completion_only_loss=True, seed=cfg.seed, dataloader_num_workers=0, dataset_num_proc=1,
                     packing=False, loss_type="nll")
    return SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok, peft_config=peft_config)


def _freeze_below(model, layer: int) -> None:
    """Stop training the LoRA weights of decoder layers below ``layer``."""
    import re
    for name, param in model.named_parameters():
        m = re.search(r"\.layers\.(\d+)\.", name)
        if "lora_" in name and m and int(m.group(1)) < layer:
            param.requires_grad_(False)


def _has_gpu() -> bool:
    import torch
    return torch.cuda.is_available()


def _last_checkpoint(folder: Path) -> str | None:
    ckpts = sorted(folder.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1])) if folder.exists() else []
    return str(ckpts[-1]) if ckpts else None


def run(cfg: SFTRunConfig) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(cfg.base)
    # bf16 on a GPU: bf16 weights; on a CPU with bf16 instructions: fp32 weights under bf16 autocast (measured
    # 1.4x faster than fp32 on an AMD AVX512-BF16 host, 1.35x slower on an Intel one without AMX (session 29), ~10x
    # slower where bf16 is emulated: training.hardware.bf16_autocast_pays() times it; the pipeline asks it)
    model = AutoModelForCausalLM.from_pretrained(cfg.base, dtype=torch.bfloat16 if cfg.bf16 and _has_gpu()
                                                 else torch.float32)
    peft_config = None
    if cfg.init_adapter:
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, cfg.init_adapter, is_trainable=True)
        _freeze_below(model, cfg.train_from_layer)
    elif cfg.lora:
        from peft import LoraConfig
        n_layers = model.config.num_hidden_layers
        peft_config = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, target_modules=list(LORA_TARGETS),
                                 layers_to_transform=list(range(cfg.lora_from_layer, n_layers)),
                                 task_type="CAUSAL_LM")
    train_rows, held = load_rows(cfg)
    eps = select_sources(episodes_of(train_rows), cfg.sources, cfg.seed, cfg.dagger_cap)
    random.Random(cfg.seed).shuffle(eps)
    tokens = [tokenize_episode(tok, e, cfg.max_length) for e in eps]
    data = Dataset.from_list(tokens)
    n_tok = sum(len(t["input_ids"]) for t in tokens)
    n_loss = sum(sum(t["completion_mask"]) for t in tokens)
    logs = []
    if cfg.lm_steps:
        lm_data = Dataset.from_list([tokenize_episode(tok, e, cfg.max_length, lm=True) for e in eps])
        t = _trainer(cfg, model, tok, lm_data, out / "lm", cfg.lm_steps)
        t.train()
        logs += [{"stage": "lm", **h} for h in t.state.log_history]
        model = t.model
    t = _trainer(cfg, model, tok, data, out / "ckpt", cfg.max_steps, peft_config)
    t.train(resume_from_checkpoint=_last_checkpoint(out / "ckpt"))
    logs += [{"stage": "sft", **h} for h in t.state.log_history]
    model = t.model
    train_s = round(time.perf_counter() - started, 1)
    if cfg.lora or cfg.init_adapter:
        model.save_pretrained(out / "adapter")
        tok.save_pretrained(out / "adapter")
        model = model.merge_and_unload()
    model.save_pretrained(out / "model", safe_serialization=True)
    tok.save_pretrained(out / "model")
    from training.constrained_eval import constrained_accuracy
    acc = constrained_accuracy(model, tok, held, cfg.eval_turns, seed=cfg.seed)
    by_source: dict[str, int] = {}
    for e in eps:
        by_source[e["source"]] = by_source.get(e["source"], 0) + 1
    report = {"config": asdict(cfg), "train_episodes": len(eps), "train_sequences_by_source": by_source,
              "train_turns": len(train_rows),
              "train_tokens_per_epoch": n_tok, "loss_tokens_per_epoch": n_loss, "heldout_turns": len(held),
              "train_seconds": train_s, "seconds": round(time.perf_counter() - started, 1),
              "constrained_eval": acc, "log": logs}
    (out / "sft_report.json").write_text(json.dumps(report, indent=1))
    from training.plots import plot_sft
    plot_sft(logs, out / "sft_loss.png")
    print(json.dumps({k: v for k, v in report.items() if k != "log"}, indent=1))
    return report


def parse_args(argv: list[str] | None = None) -> SFTRunConfig:
    return cli.parse(SFTRunConfig, argv, __doc__)


def main(argv: list[str] | None = None) -> int:
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
