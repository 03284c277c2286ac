"""vLLM engine vs plain transformers `generate` serving one request at a time (what a naive FastAPI +
transformers service does), at 1, 8 and 32 concurrent sessions, same model.

    PYTHONPATH=. .venv/bin/python bench/engine_vllm_vs_transformers.py [--sessions 1 8 32] [--steps 2] [--tokens 32] \
        [--model DIR]

Each session sends `--steps` sequential policy generations (a ~400-token harness prompt, greedy, `--tokens` new
tokens, no early stop); sessions run concurrently. vLLM: the service's in-process VLLMEngine (continuous batching,
enforce-eager). transformers: `model.generate` behind a lock, one request at a time. Prints steps/s and the speedup.
Model: the tiny untrained Qwen3 (`service.policy.bootstrap_model`), built into a temp dir, or ``--model``: a plain
HF folder, e.g. the merged default policy the service caches under ``data/merged/`` on its first start.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROMPT = ("You are a household agent. Task: put a clean apple in fridge.\nBelief: countertop 1 (receptacle), "
          "fridge 1 (receptacle, closed), sinkbasin 1 (receptacle), apple 1 at countertop 1.\n"
          "Progress: [open] find the apple; [open] clean it at the sinkbasin.\nExperience: apples are usually on "
          "countertops or in the fridge; clean objects at a sinkbasin.\n") * 4 + \
         "Observation: You arrive at countertop 1. You see a apple 1 and a knife 2.\nRespond:"


async def bench_vllm(model: str, sessions: int, steps: int, tokens: int) -> float:
    from service.policy.engines.base import GenerationRequest
    from service.policy.engines.vllm_local import VLLMEngine

    eng = VLLMEngine(model, max_model_len=2048, kv_cache_gib=0.5, enforce_eager=True, seed=0)
    await eng.start()
    try:
        async def session(k):
            for i in range(steps):
                await eng.generate(GenerationRequest(prompt=PROMPT + f" #{k}.{i}", max_tokens=tokens,
                                                     request_id=f"b{sessions}-{k}-{i}-{time.time_ns()}"))
        await session(-1)                                             # warm-up
        t = time.perf_counter()
        await asyncio.gather(*(session(k) for k in range(sessions)))
        return sessions * steps / (time.perf_counter() - t)
    finally:
        await eng.close()


async def bench_transformers(model: str, sessions: int, steps: int, tokens: int) -> float:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(model)
    lm = AutoModelForCausalLM.from_pretrained(model, torch_dtype=torch.float32).eval()
    lock = threading.Lock()

    def generate(prompt: str) -> None:
        with lock, torch.inference_mode():                           # one request at a time
            ids = tok(prompt, return_tensors="pt")
            lm.generate(**ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)

    async def session(k):
        for i in range(steps):
            await asyncio.to_thread(generate, PROMPT + f" #{k}.{i}")
    await session(-1)
    t = time.perf_counter()
    await asyncio.gather(*(session(k) for k in range(sessions)))
    return sessions * steps / (time.perf_counter() - t)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--model", default=None, help="HF model folder (default: build the tiny untrained model)")
    args = ap.parse_args()
    from service.policy.bootstrap_model import build_tiny_model

    model = args.model or str(build_tiny_model(Path(tempfile.mkdtemp()) / "tiny", seed=0))
    rows = []
    for n in args.sessions:
        v = asyncio.run(bench_vllm(model, n, args.steps, args.tokens))
        h = asyncio.run(bench_transformers(model, n, args.steps, args.tokens))
        rows.append((n, v, h))
        print(f"sessions={n}: vllm {v:.2f} steps/s, transformers {h:.2f} steps/s", flush=True)
    print(f"\n{'sessions':>8} | {'vLLM steps/s':>12} | {'transformers steps/s':>20} | {'speedup':>7}")
    for n, v, h in rows:
        print(f"{n:>8} | {v:>12.2f} | {h:>20.2f} | {v / h:>6.2f}x")


if __name__ == "__main__":
    main()
