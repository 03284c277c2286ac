"""python -m training.export --model runs/grpo/model --out models/default-policy

Export a trained policy as a folder the service and vLLM load: merged safetensors + tokenizer + model card. Settings:
``ExportConfig`` (``--help`` lists them; ``--config FILE.json`` reads them from a file, see ``training.cli``).

    CPU:  python -m training.export --model runs/grpo/model --out models/default-policy --bank data/teacher/bank.json \
              --eval runs/eval/model/eval.md --notes runs/notes.md
    GPU:  python -m training.export --model /models/Qwen3-1.7B --adapter runs/grpo-gpu/adapter --out runs/export-1.7b

A LoRA adapter (``--adapter``) is merged into its base with peft (``merge_and_unload``); weights are written in
``--dtype`` (bfloat16 by default, which halves the size). The Experience bank the policy was trained with is copied
as ``bank.json`` (the evaluator starts from it). ``MODEL_CARD.md`` records data, config, wall time and the evaluation
table given with ``--eval``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from training import cli


@dataclass
class ExportConfig:
    """Export settings."""

    model: str = field(metadata={"help": "trained model folder, or the base model with --adapter"})
    out: str = field(metadata={"help": "policy folder to write"})
    adapter: str | None = field(default=None, metadata={"help": "peft LoRA adapter folder to merge into --model"})
    dtype: str = field(default="bfloat16", metadata={"help": "dtype of the merged weights"})
    base_name: str | None = field(default=None, metadata={
        "help": "with --adapter: ship the adapter only, on this packaged base (e.g. smollm2-135m-instruct); the "
                "service merges it at start"})
    temperature: float = field(default=0.0, metadata={"help": "serving temperature to record (0 = greedy)"})
    top_p: float = field(default=1.0, metadata={"help": "serving top-p to record (with a temperature)"})
    bank: str | None = field(default=None, metadata={"help": "bank.json to ship next to the weights"})
    eval: str | None = field(default=None, metadata={"help": "markdown evaluation table for the card"})
    notes: str | None = field(default=None, metadata={"help": "markdown file with data/config/wall-time sections"})


def export(model_dir: str, out: str, adapter: str | None = None, dtype: str = "bfloat16",
           temperature: float = 0.0, top_p: float = 1.0) -> Path:
    """Merged safetensors folder; ``temperature > 0`` records sampling in generation_config.json, which the service
    uses unless EVOHARNESS_TEMPERATURE / _TOP_P are set (``service.settings.model_sampling_defaults``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter:
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    model = model.to(getattr(torch, dtype))
    model.config.dtype = dtype
    gen = model.generation_config
    gen.do_sample = temperature > 0
    gen.temperature, gen.top_p = (temperature, top_p) if temperature > 0 else (None, None)
    dest = Path(out)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(dest)
    return dest


def export_adapter(adapter_dir: str, out: str, base: str, temperature: float = 0.0, top_p: float = 1.0) -> Path:
    """A small policy folder for git: ``adapter/`` (the peft LoRA files), the tokenizer, generation_config.json and
    ``policy.json`` naming the packaged base; the service merges base + adapter into a cached folder at start
    (``service.policy.pretrained.resolve_policy_dir``)."""
    src, dest = Path(adapter_dir), Path(out)
    dest.mkdir(parents=True, exist_ok=True)
    for stale in ("model.safetensors", "config.json"):
        (dest / stale).unlink(missing_ok=True)  # a merged export of an earlier recipe
    (dest / "adapter").mkdir(exist_ok=True)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy(src / name, dest / "adapter" / name)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
        if (src / name).exists():
            shutil.copy(src / name, dest / name)
    gen = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2, "do_sample": temperature > 0}
    if temperature > 0:
        gen.update(temperature=temperature, top_p=top_p)
    (dest / "generation_config.json").write_text(json.dumps(gen, indent=1) + "\n")
    (dest / "policy.json").write_text(json.dumps({"base": base, "adapter": "adapter"}, indent=1) + "\n")
    return dest


def model_card(dest: Path, params: int, sections: dict[str, str]) -> str:
    adapter = (dest / "policy.json").exists()
    what = (f"A LoRA adapter ({params:,} parameters) on the packaged SmolLM2-135M-Instruct base" if adapter
            else f"A model with {params:,} parameters")
    parts = ["# EvoHarness default policy (trained)", "",
             (f"{what}, trained by `training/` on this repository's generated ALFWorld games (teacher SFT on whole "
              "episodes; cost-aware GRPO where the card says it ran). Serve it with the service's vLLM engine "
              "(it is grammar-constrained: every action is admissible or a harness verb)."), ""]
    for title, body in sections.items():
        parts += [f"## {title}", "", body.strip(), ""]
    text = "\n".join(parts)
    (dest / "MODEL_CARD.md").write_text(text)
    return text


def parse_args(argv: list[str] | None = None) -> ExportConfig:
    return cli.parse(ExportConfig, argv, __doc__)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.base_name:
        dest = export_adapter(args.adapter, args.out, args.base_name, args.temperature, args.top_p)
    else:
        dest = export(args.model, args.out, args.adapter, args.dtype, args.temperature, args.top_p)
    if args.bank:
        shutil.copy(args.bank, dest / "bank.json")
    from safetensors import safe_open
    weights = dest / "adapter" / "adapter_model.safetensors" if args.base_name else dest / "model.safetensors"
    with safe_open(str(weights), "pt") as f:
        params = sum(_prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118
    sections = {}
    if args.notes:
        sections["Training"] = Path(args.notes).read_text()
    if args.eval:
        sections["Evaluation"] = Path(args.eval).read_text()
    model_card(dest, params, sections)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    print(json.dumps({"out": str(dest), "params": params, "bytes": size}))
    return 0


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


if __name__ == "__main__":
    raise SystemExit(main())
