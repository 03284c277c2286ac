"""OMP_NUM_THREADS=1 .venv/bin/python bench/serving_layouts.py --games data/alfworld-fresh/valid_unseen --n 32 \\
    --levels 16 32 --json runs/serving_layouts.json

How to lay vLLM out on this box's cores behind the service, measured with the service's own traffic (issue 15's
"what moves it": threads and binding, one `api_server` per core through the remote engine, `max_num_batched_tokens`).

1. Record once: a real `evoharness serve` (`engine=remote`, one vLLM server) plays ``--n`` games through the public
   HTTP API; every step's input (observation, admissible list, won / done) is kept. ``--episodes FILE`` caches the
   recording, so a rerun replays the same steps.
2. Per layout: start its vLLM servers, a service with ``engine=remote`` pointed at them (``remote_policy`` as the
   layout says), and replay the first L recorded games with L client threads for each level L. The servers' prefix
   caches are reset before each level and their prefix-cache counters summed around it.

Layouts (``--layouts`` picks; CPU ids are this process's allowed CPUs, in order):

* ``1srv-1t``: one server, one OpenMP thread on the first CPU (the layout of bench/service_vs_vllm.py);
* ``1srv-2t``: one server, one OpenMP thread per CPU;
* ``2srv-affinity``: one server per CPU, one thread each; the service keeps each session on one server;
* ``2srv-least``: the same servers, each generation to the server with fewer in flight (a session's prompt
  prefix is then cached on whichever server served its last step);
* ``chunked-512`` / ``chunked-2048``: ``1srv-1t`` with chunked prefill and that token budget per engine step
  (the service's engine runs without chunked prefill and a budget of max(max_model_len, 2048));
* ``batched-8192``: ``1srv-1t`` with a budget of 8,192 tokens per engine step, no chunked prefill;
* ``int8``: ``1srv-1t`` serving ``--int8-model`` (bench/int8_checkpoint.py's W8A8 copy of the policy) instead;
* ``inproc-1t`` / ``inproc-2t``: no vLLM server: the service as ``make serve`` runs it, with its in-process engine
  (compiled, the same KV cache), its OpenMP threads as in ``1srv-1t`` / ``1srv-2t``. Its prefix cache cannot be
  reset from outside, so run one level per invocation for these (a second level would find the first's prefixes);
* ``transformers``: the same merged checkpoint served by transformers ``generate`` behind the same grammar, one
  request at a time, one torch thread (bench/hf_completions_server.py). It is slow, so each level stops sending
  new steps after ``--transformers-budget-s`` seconds; the steps it played are each session's first ones, whose
  prompts are the shortest, so its steps/s is, if anything, flattering.

Steps whose recorded step ran no generation (the final ``done`` report) are not timed. A table row: steps, wall
seconds, steps/s, step p50 / p99, prefix-cache hit rate, and how many of the service's actions equal the recording's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.service_vs_vllm import (  # noqa: E402
    pct,
    prefix_counters,
    record_game,
    replay_service,
    reset_prefix_cache,
    serve_remote,
    start_hf,
    start_vllm,
    stop,
)
from service.policy.pretrained import resolve_policy_dir  # noqa: E402
from tests.deploy.live_server import live_server  # noqa: E402
from training.envs.alfworld.paths import list_games  # noqa: E402

CPUS = sorted(os.sched_getaffinity(0))


def one(threads: int, cpus: list[int], extra_args: tuple[str, ...] = ()) -> dict:
    """A vLLM server spec: ``threads`` OpenMP threads bound to ``cpus``."""
    bind = ",".join(str(c) for c in cpus)
    return {"env": {"OMP_NUM_THREADS": str(threads), "VLLM_CPU_OMP_THREADS_BIND": bind}, "args": extra_args}


def layouts(int8_model: str | None = None) -> dict[str, dict]:
    first, per_cpu = CPUS[:1], [[c] for c in CPUS]
    chunked = ("--enable-chunked-prefill", "--max-num-batched-tokens")
    return {
        "1srv-1t": {"servers": [one(1, first)], "policy": "affinity"},
        "1srv-2t": {"servers": [one(len(CPUS), CPUS)], "policy": "affinity"},
        "2srv-affinity": {"servers": [one(1, c) for c in per_cpu], "policy": "affinity"},
        "2srv-least": {"servers": [one(1, c) for c in per_cpu], "policy": "least_outstanding"},
        "chunked-512": {"servers": [one(1, first, (*chunked, "512"))], "policy": "affinity"},
        "chunked-2048": {"servers": [one(1, first, (*chunked, "2048"))], "policy": "affinity"},
        "batched-8192": {"servers": [one(1, first, ("--max-num-batched-tokens", "8192"))], "policy": "affinity"},
        "int8": {"servers": [one(1, first)], "policy": "affinity", "model": int8_model},
        "inproc-1t": {"servers": [], "inproc": one(1, first)["env"]},
        "inproc-2t": {"servers": [], "inproc": one(len(CPUS), CPUS)["env"]},
        "transformers": {"servers": [{"kind": "hf", "threads": 1}], "policy": "affinity", "budget": True},
    }


def run_level(layout: str, url: str, servers: list[str], episodes: list[dict], sessions: int,
              budget_s: float | None = None, reset: bool = True) -> dict:
    """Replay ``episodes`` through the service at ``url``; ``servers``: where vLLM's counters are read (and its prefix
    cache reset first, if ``reset``)."""
    for s in servers if reset else ():
        reset_prefix_cache(s)
    before = [prefix_counters(s) for s in servers]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(sessions) as pool:
        deadline = None if budget_s is None else t0 + budget_s
        results = list(pool.map(lambda e: replay_service(url, e, deadline), episodes))
    wall = time.perf_counter() - t0
    after = [prefix_counters(s) for s in servers]

    def delta(name: str) -> float:
        return sum(a.get(name, 0) - b.get(name, 0) for a, b in zip(after, before))

    q, h = delta("prefix_cache_queries_total"), delta("prefix_cache_hits_total")
    computed, generated = delta("prompt_tokens_total") - h, delta("generation_tokens_total")
    lat = [x for r in results for x in r["latency"]]
    row = {"layout": layout, "sessions": sessions, "games": len(episodes), "steps": len(lat),
           "seconds": round(wall, 2), "steps_per_s": round(len(lat) / wall, 2), "p50": pct(lat, 0.5),
           "p99": pct(lat, 0.99), "prefix_cache_hit": round(h / q, 3) if q else None,
           "same_action": sum(r["same_action"] for r in results),
           # the engines' own token counts: prompt tokens not served from the prefix cache, and decoded tokens
           # (None where the engine exports no counters: the transformers server)
           "computed_prompt_tokens": int(computed) if q else None, "generated_tokens": int(generated) if q else None,
           "prefill_tokens_per_s": round(computed / wall, 1) if q else None,
           "decode_tokens_per_s": round(generated / wall, 1) if q else None}
    print(f"{layout} at {sessions} sessions: {row}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--policy", default=str(ROOT / "models" / "default-policy"))
    ap.add_argument("--games", required=True, help="folder of generated games (a split folder)")
    ap.add_argument("--n", type=int, default=32, help="games recorded (at least the largest level)")
    ap.add_argument("--levels", type=int, nargs="+", default=[16, 32], help="sessions at once, per level")
    ap.add_argument("--layouts", nargs="+",
                    default=[k for k in layouts() if k not in ("int8", "transformers", "inproc-1t", "inproc-2t")],
                    choices=list(layouts()))
    ap.add_argument("--int8-model", default=None, help="the int8 layout's model folder (bench/int8_checkpoint.py)")
    ap.add_argument("--record-sessions", type=int, default=16, help="sessions at once while recording")
    ap.add_argument("--max-steps", type=int, default=50)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--kv-cache-gib", type=float, default=1.0, help="per server")
    ap.add_argument("--transformers-budget-s", type=float, default=300.0,
                    help="per level: the transformers layout starts no step after this many seconds")
    ap.add_argument("--episodes", default=None, help="recording cache: read if it exists, else written")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if "int8" in args.layouts and not args.int8_model:
        ap.error("the int8 layout needs --int8-model")
    model_dir = resolve_policy_dir(args.policy)
    out: dict = {"policy": args.policy, "model_dir": str(model_dir), "games": args.games, "cpus": CPUS,
                 "rows": []}

    def save() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))

    def servers(tmp: Path, spec: dict, stack: ExitStack) -> list[str]:
        urls = []
        for i, s in enumerate(spec["servers"]):
            if s.get("kind") == "hf":
                proc, url = start_hf(model_dir, args.policy, s["threads"], tmp / f"hf-{i}.log")
                stack.callback(stop, proc)
                urls.append(url)
                continue
            proc, url = start_vllm(Path(spec.get("model") or model_dir), args.policy, args.kv_cache_gib,
                                   args.max_model_len, max(max(args.levels), 16), tmp / f"vllm-{i}.log", s["args"],
                                   s["env"])
            stack.callback(stop, proc)
            urls.append(url)
        return urls

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.episodes and Path(args.episodes).exists():
            episodes = json.loads(Path(args.episodes).read_text())
        else:
            games = list_games(Path(args.games))[: args.n]
            if len(games) < max(args.levels):
                ap.error(f"{len(games)} games, fewer than the largest level {max(args.levels)}")
            t0 = time.perf_counter()
            with ExitStack() as stack:
                urls = servers(tmp, layouts()["1srv-1t"], stack)
                with serve_remote(Path(args.policy), urls, tmp / "record.log", args.max_model_len) as url, \
                        ThreadPoolExecutor(args.record_sessions) as pool:
                    episodes = list(pool.map(lambda g: record_game(url, g, args.max_steps), games))
            out["record"] = {"seconds": round(time.perf_counter() - t0, 1), "games": len(episodes),
                             "won": sum(e["won"] for e in episodes), "steps": sum(len(e["steps"]) for e in episodes)}
            print(f"recorded: {out['record']}", flush=True)
            if args.episodes:
                Path(args.episodes).write_text(json.dumps(episodes))
        for name in args.layouts:
            spec = layouts(args.int8_model)[name]
            if "inproc" in spec:
                with live_server(Path(args.policy), tmp / f"serve-{name}.log", EVOHARNESS_ENFORCE_EAGER="0",
                                 EVOHARNESS_MAX_MODEL_LEN=str(args.max_model_len), EVOHARNESS_RATE_LIMIT="0",
                                 EVOHARNESS_KV_CACHE_GIB=str(args.kv_cache_gib), EVOHARNESS_ENGINE_TIMEOUT_S="600",
                                 EVOHARNESS_STEP_TIMEOUT_S="900", **spec["inproc"]) as url:
                    for n in args.levels:
                        out["rows"].append(run_level(name, url, [url], episodes[:n], n, reset=False))
                        save()
                continue
            with ExitStack() as stack:
                urls = servers(tmp, spec, stack)
                with serve_remote(Path(args.policy), urls, tmp / f"serve-{name}.log", args.max_model_len,
                                  spec["policy"]) as url:
                    for n in args.levels:
                        budget = args.transformers_budget_s if spec.get("budget") else None
                        out["rows"].append(run_level(name, url, urls, episodes[:n], n, budget))
                        save()
    print("\n| layout | sessions | steps | wall s | steps/s | step p50 s | step p99 s | prefix cache | same action | "
          "computed prompt tok/s | decoded tok/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in out["rows"]:
        hit = f"{100 * r['prefix_cache_hit']:.1f} %" if r["prefix_cache_hit"] is not None else "-"
        print(f"| {r['layout']} | {r['sessions']} | {r['steps']} | {r['seconds']} | {r['steps_per_s']} | {r['p50']} | "
              f"{r['p99']} | {hit} | {r['same_action']}/{r['steps']} | {r['prefill_tokens_per_s'] or '-'} | "
              f"{r['decode_tokens_per_s'] or '-'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
