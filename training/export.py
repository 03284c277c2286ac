"""Export a trained policy as a folder the service and vLLM load: merged safetensors + tokenizer + model card.

    CPU:  python -m training.export --model runs/grpo/model --out models/default-policy --bank data/teacher/bank.json \
              --eval runs/eval/model/eval.md --notes runs/notes.md
    GPU:  python -m training.export --model /models/Qwen3-1.7B --adapter runs/grpo-gpu/adapter --out runs/export-1.7b

A LoRA adapter (``--adapter``) is merged into its base with peft (``merge_and_unload``); weights are written in
``--dtype`` (bfloat16 by default, which halves the size). The Experience bank the policy was trained with is copied
as ``bank.json`` (the evaluator starts from it). ``MODEL_CARD.md`` records data, config, wall time and the evaluation
table given with ``--eval``.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path


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


def model_card(dest: Path, params: int, sections: dict[str, str]) -> str:
    parts = ["# EvoHarness default policy (trained)", "",
             (f"A `Qwen3ForCausalLM` with {params:,} parameters trained by `training/` on this repository's generated "
             "ALFWorld games (teacher SFT, then cost-aware GRPO). Serve it with the service's vLLM engine "
             "(it is grammar-constrained: every action is admissible or a harness verb)."), ""]
    for title, body in sections.items():
        parts += [f"## {title}", "", body.strip(), ""]
    text = "\n".join(parts)
    (dest / "MODEL_CARD.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Export a merged safetensors policy folder with a model card.")
    ap.add_argument("--model", required=True)
    ap.add_argument("--adapter", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--temperature", type=float, default=0.0, help="serving temperature to record (0 = greedy)")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--bank", default=None, help="bank.json to ship next to the weights")
    ap.add_argument("--eval", default=None, help="markdown evaluation table for the card")
    ap.add_argument("--notes", default=None, help="markdown file with data/config/wall-time sections")
    args = ap.parse_args(argv)
    dest = export(args.model, args.out, args.adapter, args.dtype, args.temperature, args.top_p)
    if args.bank:
        shutil.copy(args.bank, dest / "bank.json")
    from safetensors import safe_open
    with safe_open(str(dest / "model.safetensors"), "pt") as f:
        params = sum(_prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118
    sections = {}
    if args.notes:
        sections["Training"] = Path(args.notes).read_text()
    if args.eval:
        sections["Evaluation"] = Path(args.eval).read_text()
    model_card(dest, params, sections)
    size = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    print(json.dumps({"out": str(dest), "params": params, "bytes": size}))
    return 0


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


if __name__ == "__main__":
    raise SystemExit(main())
