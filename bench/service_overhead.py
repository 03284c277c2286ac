"""Service overhead per step vs a bare FastAPI + Redis echo endpoint, in the same run.

    PYTHONPATH=. .venv/bin/python bench/service_overhead.py [--concurrency 1 16 64] [--min-requests 400] [--rounds 2]

Starts a private redis-server and two single-worker uvicorn processes: the EvoHarness service with the zero-cost
ScriptedEngine (bench/service_scripted_app.py: every step = perception, one policy turn, Lua commit, audit) and
the echo app (parse the same JSON body, SET + GET it in Redis). N concurrent sessions each send `--steps` steps
(the echo side: N concurrent clients, the same number of requests), at least --min-requests per side, echo and
service alternating --rounds times. Prints p50/p99 client-side latency of each and the ratio. The scripted engine
costs nothing, so the service column is the service's own overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from service.embedded_redis import EmbeddedRedis, free_port  # noqa: E402

ROOM = ["go to countertop 1", "go to fridge 1", "go to sinkbasin 1", "look", "inventory"]
OBS = "You arrive at countertop 1. On the countertop 1, you see a apple 1, a knife 2, and a mug 1."


def start(factory: str, redis_url: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    # the per-key rate limit stays on (its Redis round trip is part of every request) but far above the bench load
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "EVOHARNESS_AUTH": "off", "EVOHARNESS_RATE_LIMIT": "1000000000"}
    p = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", f"bench.service_scripted_app:{factory}",
                          "--port", str(port), "--log-level", "warning", "--no-access-log"], cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(f"{url}/docs", timeout=1)
            return p, url
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{factory} did not start")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def run_service(url: str, n: int, steps: int) -> list[float]:
    lat: list[float] = []
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as c:
        sids = [(await c.post("/v1/sessions", json={"task": "put a clean apple in fridge", "domain": "alfworld",
                                                     "harness_cap": 0, "max_steps": steps + 5})).json()["session_id"]
                for _ in range(n)]

        async def one(sid):
            for _ in range(steps):
                t = time.perf_counter()
                r = await c.post(f"/v1/sessions/{sid}/step", json={"observation": OBS, "admissible_actions": ROOM})
                lat.append(time.perf_counter() - t)
                assert r.status_code == 200, r.text

        await asyncio.gather(*(one(s) for s in sids))
    return lat


async def run_echo(url: str, n: int, steps: int) -> list[float]:
    lat: list[float] = []
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as c:
        async def one(k):
            for _ in range(steps):
                t = time.perf_counter()
                r = await c.post(f"/echo/s{k}", json={"observation": OBS, "admissible_actions": ROOM})
                lat.append(time.perf_counter() - t)
                assert r.status_code == 200

        await asyncio.gather(*(one(k) for k in range(n)))
    return lat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--steps", type=int, default=8, help="at least this many steps per session at each concurrency")
    ap.add_argument("--min-requests", type=int, default=400,
                    help="per side and concurrency: more steps per session until this many requests (a p50 of 8 "
                         "requests swung by +-0.4x between runs)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="echo and service alternate this many times per concurrency, so background load drifts "
                         "hit both sides alike")
    args = ap.parse_args()
    with EmbeddedRedis() as redis:
        svc, svc_url = start("service_app", redis.url)
        echo, echo_url = start("echo_app", redis.url)
        try:
            asyncio.run(run_service(svc_url, 2, 3))            # warm up both
            asyncio.run(run_echo(echo_url, 2, 3))
            print(f"{'sessions':>8} {'requests':>8} | {'echo p50':>9} {'echo p99':>9} | {'svc p50':>9} "
                  f"{'svc p99':>9} | {'p50 ratio':>9} {'p99 ratio':>9}")
            for n in args.concurrency:
                steps = max(args.steps, -(-args.min_requests // (n * args.rounds)))
                e, s = [], []
                for _ in range(args.rounds):
                    e += asyncio.run(run_echo(echo_url, n, steps))
                    s += asyncio.run(run_service(svc_url, n, steps))
                ms = lambda x: f"{1000 * x:8.1f}ms"  # noqa: E731
                print(f"{n:>8} {len(s):>8} | {ms(pct(e, .5))} {ms(pct(e, .99))} | {ms(pct(s, .5))} "
                      f"{ms(pct(s, .99))} | {pct(s, .5) / pct(e, .5):>8.2f}x {pct(s, .99) / pct(e, .99):>8.2f}x",
                      flush=True)
        finally:
            for p in (svc, echo):
                p.terminate()
                p.wait(10)


if __name__ == "__main__":
    main()
