"""Server CPU time per request: the service's step vs the echo app, read from the uvicorn process (psutil).

    PYTHONPATH=. .venv/bin/python bench/service_cpu.py [--requests 2000] [--concurrency 1] [--repeats 3]
                                                       [--root DIR ...]

Starts a private redis-server and, for each --root (a checkout of this repository; default: this one), a
single-worker uvicorn with bench/service_scripted_app.py's service_app, plus one echo app. Each repeat sends
--requests steps (the bench's body, --concurrency sessions) to every server in turn and divides the server
process's user+system CPU time by the request count; prints the minimum over repeats (the least disturbed figure
on a shared machine) and every repeat. Client latency is not measured here: see service_overhead.py.
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
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.service_overhead import OBS, ROOM  # noqa: E402
from service.embedded_redis import EmbeddedRedis, free_port  # noqa: E402


def start(root: Path, factory: str, redis_url: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1",
           "EVOHARNESS_AUTH": "off", "EVOHARNESS_RATE_LIMIT": "1000000000"}
    p = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", f"bench.service_scripted_app:{factory}",
                          "--port", str(port), "--log-level", "warning", "--no-access-log"], cwd=root, env=env)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(f"{url}/docs", timeout=1)
            return p, url
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{factory} in {root} did not start")


async def drive(url: str, echo: bool, n: int, total: int) -> None:
    per = -(-total // n)
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    body = {"observation": OBS, "admissible_actions": ROOM}
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as c:
        if echo:
            paths = [f"/echo/s{k}" for k in range(n)]
        else:
            paths = []
            for _ in range(n):
                r = await c.post("/v1/sessions", json={"task": "put a clean apple in fridge", "domain": "alfworld",
                                                       "harness_cap": 0, "max_steps": per + 5})
                paths.append(f"/v1/sessions/{r.json()['session_id']}/step")

        async def one(path):
            for _ in range(per):
                r = await c.post(path, json=body)
                assert r.status_code == 200, r.text

        await asyncio.gather(*(one(p) for p in paths))


def cpu_per_request(proc: psutil.Process, url: str, echo: bool, n: int, total: int) -> float:
    asyncio.run(drive(url, echo, n, min(total, 50)))       # sessions created, caches warm, outside the count
    t = proc.cpu_times()
    asyncio.run(drive(url, echo, n, total))
    t2 = proc.cpu_times()
    return (t2.user - t.user + t2.system - t.system) / (n * -(-total // n))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--root", type=Path, nargs="+", default=[ROOT])
    args = ap.parse_args()
    with EmbeddedRedis() as redis:
        servers = [(str(r), *start(r.resolve(), "service_app", redis.url), False) for r in args.root]
        servers.append(("echo", *start(ROOT, "echo_app", redis.url), True))
        try:
            runs: dict[str, list[float]] = {name: [] for name, *_ in servers}
            for _ in range(args.repeats):
                for name, p, url, echo in servers:
                    runs[name].append(cpu_per_request(psutil.Process(p.pid), url, echo, args.concurrency,
                                                      args.requests))
            for name, xs in runs.items():
                print(f"{name}: min {1000 * min(xs):.3f} ms CPU/request  (runs: "
                      f"{', '.join(f'{1000 * x:.3f}' for x in xs)})", flush=True)
        finally:
            for _, p, _, _ in servers:
                p.terminate()
                p.wait(10)


if __name__ == "__main__":
    main()
