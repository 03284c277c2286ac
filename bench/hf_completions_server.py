"""OMP_NUM_THREADS=1 .venv/bin/python bench/hf_completions_server.py --model data/merged/<hash> --port 8011

The policy served by plain transformers ``generate`` behind the service's grammar, on the wire the service's remote
engine speaks: issue 15's "the same model served by transformers generate behind the same grammar", so that
bench/serving_layouts.py can put the whole service (HTTP -> Redis -> engine) in front of it and compare it with vLLM
on the same recorded steps.

What a straightforward transformers deployment does: one ``model.generate`` at a time (behind a lock; HF has no
continuous batching), greedy unless the request asks for a temperature, float32, KV cache on, and the request's
``structured_outputs.regex`` compiled by xgrammar (the library vLLM's structured outputs use) into a
``LogitsProcessor``. Routes: ``GET /health``, ``GET /v1/models``, ``POST /v1/completions`` (the fields the service
sends), and for the bench ``POST /reset_prefix_cache`` (no cache: no-op) and ``GET /metrics`` (no prefix-cache
counters). A measurement tool, not a serving path.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import uuid


def build_app(model_dir: str, served_name: str, threads: int):
    import torch
    import xgrammar as xgr
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=model.config.vocab_size,
                                              stop_token_ids=[tok.eos_token_id])
    compiler = xgr.GrammarCompiler(info, max_threads=1)
    lock = threading.Lock()

    def complete(body: dict) -> dict:
        ids = tok(body["prompt"], add_special_tokens=False, return_tensors="pt")["input_ids"]
        regex = (body.get("structured_outputs") or {}).get("regex")
        processors = [xgr.contrib.hf.LogitsProcessor(compiler.compile_regex(regex))] if regex else []
        temperature = float(body.get("temperature") or 0.0)
        sampling = {"do_sample": True, "temperature": temperature, "top_p": float(body.get("top_p") or 1.0)} \
            if temperature > 0 else {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        with lock, torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=int(body["max_tokens"]),
                                 logits_processor=processors, eos_token_id=tok.eos_token_id,
                                 pad_token_id=tok.eos_token_id, **sampling)
        new = out[0, ids.shape[1]:].tolist()
        text = tok.decode([t for t in new if t != tok.eos_token_id])
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": served_name,
                "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": ids.shape[1], "completion_tokens": len(new),
                          "total_tokens": ids.shape[1] + len(new)}}

    async def completions(request: Request):
        body = await request.json()
        try:
            return JSONResponse(await asyncio.to_thread(complete, body))
        except (KeyError, ValueError, RuntimeError) as e:
            return JSONResponse({"error": {"message": f"{type(e).__name__}: {e}"}}, status_code=400)

    async def models(_: Request):
        return JSONResponse({"object": "list", "data": [{"id": served_name, "object": "model"}]})

    async def health(_: Request):
        return PlainTextResponse("")

    async def metrics(_: Request):
        return PlainTextResponse("")

    return Starlette(routes=[Route("/health", health), Route("/v1/models", models),
                             Route("/v1/completions", completions, methods=["POST"]),
                             Route("/reset_prefix_cache", health, methods=["POST"]), Route("/metrics", metrics)])


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--model", required=True, help="a plain HF folder (the service's merged checkpoint)")
    ap.add_argument("--served-model-name", default="hf")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args(argv)
    uvicorn.run(build_app(args.model, args.served_model_name, args.threads), host="127.0.0.1", port=args.port,
                log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
