"""CPU time per request through the whole ASGI app in this process: no HTTP server, no HTTP client.

    PYTHONPATH=. .venv/bin/python bench/service_cpu_asgi.py [service|echo] [--requests 2000] [--repeats 5]

Calls bench/service_scripted_app.py's service_app (or echo_app) directly with an ASGI scope for the bench's step
body (FastAPI, auth, validation, the step, its Redis calls to a private redis-server) and divides this process's
CPU time (time.process_time) by the request count; prints the minimum over repeats. Without uvicorn, the client
and their scheduling, the figure moves by a few percent between runs on a loaded machine, where
bench/service_cpu.py (the uvicorn process's CPU, client included in the box's load) moves by 10-20 %. To compare
two versions, run it from each checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.service_overhead import OBS, ROOM  # noqa: E402
from service.embedded_redis import EmbeddedRedis  # noqa: E402

BODY = json.dumps({"observation": OBS, "admissible_actions": ROOM}).encode()


async def post(app, path: str, body: bytes) -> int:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"bench"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    sent, status = False, []

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()                     # no disconnect while the request runs

    async def send(msg):
        if msg["type"] == "http.response.start":
            status.append(msg["status"])

    await app(scope, receive, send)
    return status[0]


async def measure(which: str, requests: int, repeats: int) -> list[float]:
    from bench.service_scripted_app import echo_app, service_app
    from service.api.schemas import SessionCreate

    app = service_app() if which == "service" else echo_app()
    out = []
    async with app.router.lifespan_context(app):
        for rep in range(repeats):
            if which == "service":
                created = await app.state.sessions.create(SessionCreate(
                    task="put a clean apple in fridge", domain="alfworld", harness_cap=0, max_steps=requests + 100),
                    "default", "dev")
                path = f"/v1/sessions/{created['session_id']}/step"
            else:
                path = f"/echo/s{rep}"
            for _ in range(50):                          # warm: caches, connections
                assert await post(app, path, BODY) == 200
            t = time.process_time()
            for _ in range(requests):
                await post(app, path, BODY)
            out.append((time.process_time() - t) / requests)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("which", nargs="?", choices=["service", "echo"], default="service")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with EmbeddedRedis() as redis:
        # the settings the uvicorn bench uses: dev mode, the rate limit on but far above the load
        os.environ.update(REDIS_URL=redis.url, EVOHARNESS_AUTH="off", EVOHARNESS_RATE_LIMIT="1000000000")
        xs = asyncio.run(measure(args.which, args.requests, args.repeats))
    print(f"{args.which} ({ROOT}): min {1000 * min(xs):.3f} ms CPU/request  "
          f"(runs: {', '.join(f'{1000 * x:.3f}' for x in xs)})", flush=True)


if __name__ == "__main__":
    main()
