"""OMP_NUM_THREADS=2 .venv/bin/python bench/roofline.py [--model DIR] [--threads 2] [--json out.json]

This CPU's limits for the served policy, measured, then turned into tokens/s (issue 15, "Roofline"):

* sustained matmul GFLOP/s at the model's own shapes (fp32 and, where the CPU has the instructions, bf16), for a
  prefill-sized batch of tokens (every token of a prompt at once) and a decode-sized one (one token per session);
* memory bandwidth (a large copy), which bounds decoding: each decode step reads every weight once;
* from the model's FLOPs per token (2 x the matmul parameters it multiplies by, plus attention over the context),
  the prefill tokens/s limit, and the decode steps/s limit (weights bytes / bandwidth) times the batch.

It prints a table; what vLLM achieves against these limits is in docs/benchmarks.md (the evaluation's tokens/s).
Run it on an idle box: it measures the machine, not the code.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def shapes(cfg) -> list[tuple[str, int, int]]:
    """(name, in, out) of every matmul of one decoder layer of a Llama-style model."""
    d, f = cfg.hidden_size, cfg.intermediate_size
    kv = cfg.num_key_value_heads * (d // cfg.num_attention_heads)
    return [("q", d, d), ("k", d, kv), ("v", d, kv), ("o", d, d), ("gate", d, f), ("up", d, f), ("down", f, d)]


def flops_per_token(cfg, context: int, with_head: bool) -> float:
    """Matmul FLOPs of one token through the model (2 per multiply-add), attention over `context` tokens included;
    `with_head`: the vocabulary projection too (every decoded token; only the last token of a prefill)."""
    per_layer = sum(2 * i * o for _, i, o in shapes(cfg))
    attention = 2 * 2 * context * cfg.hidden_size          # q.k and attention x v, all heads
    head = 2 * cfg.hidden_size * cfg.vocab_size if with_head else 0
    return cfg.num_hidden_layers * (per_layer + attention) + head


def matmul_gflops(tokens: int, cfg, dtype, seconds: float = 2.0) -> float:
    """Sustained GFLOP/s of one layer's matmuls on a (tokens x hidden) activation, repeated for `seconds`."""
    import torch

    weights = [torch.randn(i, o, dtype=dtype) for _, i, o in shapes(cfg)]
    acts = {i: torch.randn(tokens, i, dtype=dtype) for _, i, _ in shapes(cfg)}
    flops = sum(2 * tokens * w.shape[0] * w.shape[1] for w in weights)
    for w in weights:                       # warm-up
        acts[w.shape[0]] @ w
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for w in weights:
            acts[w.shape[0]] @ w
        n += 1
    return n * flops / (time.perf_counter() - t0) / 1e9


def bandwidth_gbs(mib: int = 512, seconds: float = 2.0) -> float:
    """GB/s of a large tensor copy (read + write counted)."""
    import torch

    src = torch.empty(mib * 2 ** 20 // 4, dtype=torch.float32).normal_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        dst.copy_(src)
        n += 1
    return n * 2 * src.numel() * 4 / (time.perf_counter() - t0) / 1e9


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="model or policy folder (default: the shipped policy's base)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--context", type=int, default=2000, help="context tokens for the attention FLOPs")
    p.add_argument("--prefill-tokens", type=int, default=512)
    p.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)

    import torch
    from transformers import AutoConfig

    from service.hardware import cpu_has_bf16
    from service.policy.pretrained import ensure_base, read_policy

    torch.set_num_threads(args.threads)
    folder = Path(args.model or ROOT / "models" / "default-policy")
    meta = read_policy(folder)
    folder = ensure_base(meta["base"]) if meta else folder     # a LoRA leaves the base's shapes as they are
    cfg = AutoConfig.from_pretrained(str(folder))
    params = cfg.num_hidden_layers * sum(i * o for _, i, o in shapes(cfg)) + cfg.hidden_size * cfg.vocab_size
    bw = bandwidth_gbs(seconds=args.seconds)
    prefill_flops = flops_per_token(cfg, args.context, with_head=False)
    decode_flops = flops_per_token(cfg, args.context, with_head=True)
    rows = []
    for dtype, name, size in [(torch.float32, "float32", 4)] + ([(torch.bfloat16, "bfloat16", 2)]
                                                               if cpu_has_bf16() else []):
        prefill = matmul_gflops(args.prefill_tokens, cfg, dtype, args.seconds)
        decode = {b: matmul_gflops(b, cfg, dtype, args.seconds) for b in (1, 8, 32, 64)}
        weight_gb = params * size / 1e9
        rows.append({
            "dtype": name, "prefill_gflops": round(prefill, 1),
            "prefill_tokens_per_s_limit": round(prefill * 1e9 / prefill_flops),
            "decode_gflops": {b: round(g, 1) for b, g in decode.items()},
            "weights_gb": round(weight_gb, 3),
            # a decode step reads every weight once (bandwidth) and multiplies (compute): the slower bounds it
            "decode_tokens_per_s_limit": {b: round(min(bw / weight_gb * b, g * 1e9 / decode_flops))
                                          for b, g in decode.items()}})
    out = {"model": str(folder), "threads": args.threads, "context": args.context, "matmul_params": params,
           "prefill_flops_per_token": prefill_flops, "decode_flops_per_token": decode_flops,
           "bandwidth_gbs": round(bw, 1), "bf16_native": cpu_has_bf16(), "rows": rows}
    print(f"model {folder.name}: {params / 1e6:.1f} M matmul parameters; {prefill_flops / 1e6:.0f} MFLOP per prefill "
          f"token, {decode_flops / 1e6:.0f} per decoded token at {args.context} tokens of context; "
          f"copy bandwidth {bw:.1f} GB/s; {args.threads} threads")
    print("| dtype | prefill GFLOP/s | prefill tokens/s limit | decode GFLOP/s at batch 1 / 8 / 32 / 64 | "
          "decode tokens/s limit at 1 / 8 / 32 / 64 |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dtype']} | {r['prefill_gflops']} | {r['prefill_tokens_per_s_limit']:,} | "
              + " / ".join(str(v) for v in r["decode_gflops"].values()) + " | "
              + " / ".join(f"{v:,}" for v in r["decode_tokens_per_s_limit"].values()) + " |")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
