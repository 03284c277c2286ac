"""OMP_NUM_THREADS=2 .venv/bin/python bench/int8_checkpoint.py --policy models/default-policy \
    --out data/int8/default-policy

Write an int8 weights + int8 dynamic activations (W8A8) copy of a served policy, for issue 15's "int8 weights where
the CPU has the instructions" measurement (bench/serving_layouts.py's ``int8`` layout loads it).

The folder is vLLM's ``compressed-tensors`` "int-quantized" format, which vLLM-CPU runs with oneDNN int8 kernels:

* every ``nn.Linear`` of the decoder layers (q/k/v/o and the MLP's gate/up/down): an int8 ``weight`` [out, in] and a
  float32 ``weight_scale`` [out, 1], one symmetric scale per output channel (max |w| / 127);
* activations: quantized per token at run time (dynamic, symmetric), so no calibration data is needed;
* embeddings, norms and the (tied) LM head stay float32.

Which int8 kernel vLLM-CPU picks depends on the host: with AMX it runs its SGL kernel, which takes bfloat16 or half
activations only ("int8_scaled_mm_with_quant: expect A to be bfloat16 or half"); without AMX it runs oneDNN, which
takes float32. ``activation_dtype()`` names the one this host needs; the folder's ``torch_dtype`` is set to it, and
anything that loads the folder with an explicit dtype should pass it.

Nothing here is used by the service: it is a measurement. Ours, written from the format's description in vLLM's
compressed-tensors loader (``vllm/model_executor/layers/quantization/compressed_tensors``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.policy.pretrained import resolve_policy_dir  # noqa: E402

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

QUANT_CONFIG = {
    "quant_method": "compressed-tensors",
    "format": "int-quantized",
    "quantization_status": "compressed",
    "config_groups": {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
                              "dynamic": True},
    }},
    "ignore": ["lm_head"],
}


def activation_dtype() -> str:
    """The dtype vLLM-CPU's int8 linear kernel accepts on this host (see the module docstring)."""
    import torch

    return "bfloat16" if torch.cpu._is_amx_tile_supported() else "float32"


def quantize_channelwise(w):
    """int8 weight and float32 per-output-channel scale with w ≈ q * scale."""
    import torch

    scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127.0
    q = torch.clamp(torch.round(w / scale), -127, 127).to(torch.int8)
    return q, scale.to(torch.float32)


def convert(src: Path, out: Path) -> dict:
    import torch
    from safetensors.torch import load_file, save_file

    shards = sorted(src.glob("*.safetensors"))
    if not shards:
        raise SystemExit(f"{src}: no safetensors weights")
    state: dict = {}
    for f in shards:
        state.update(load_file(str(f)))
    new, err, n = {}, 0.0, 0
    for name, t in state.items():
        if name.endswith(".weight") and name.split(".")[-2] in LINEARS and t.dim() == 2:
            q, s = quantize_channelwise(t.float())
            new[name] = q
            new[name[: -len("weight")] + "weight_scale"] = s
            err = max(err, float((q.float() * s - t.float()).abs().max() / t.float().abs().max()))
            n += 1
        else:
            new[name] = t.to(torch.float32) if t.is_floating_point() else t
    out.mkdir(parents=True, exist_ok=True)
    save_file(new, str(out / "model.safetensors"), metadata={"format": "pt"})
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != "model.safetensors.index.json":
            shutil.copy2(f, out / f.name)
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = QUANT_CONFIG
    cfg["torch_dtype"] = activation_dtype()
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    return {"linears": n, "max_rel_error": round(err, 5),
            "bytes_in": sum(f.stat().st_size for f in shards),
            "bytes_out": (out / "model.safetensors").stat().st_size}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--policy", default=str(ROOT / "models" / "default-policy"),
                    help="a policy folder (base + LoRA: its merged checkpoint is quantized) or a plain HF folder")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    print(json.dumps(convert(resolve_policy_dir(args.policy), Path(args.out))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
