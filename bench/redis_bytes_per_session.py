"""Redis bytes per session over a 200-step session, and of the Experience bank with and without consolidation.

    PYTHONPATH=. .venv/bin/python bench/redis_bytes_per_session.py [--steps 200] [--episodes 10]

In process (httpx ASGI transport), private redis-server, the scripted engine (Redis bytes depend on what the
service writes, not on the model): every 4th policy response is a `note [...]` harness call, the others an
environment action; each observation names a new object, so Belief keeps growing unless its caps bound it.
Table 1: one session of `--steps` steps: bytes (Redis MEMORY USAGE) of its state, audit stream and all its keys.
Table 2: `--episodes` sessions of steps/episodes steps each on one bank, ended one after the other, with no
consolidation vs consolidation after every episode: the bank's bytes (state + audit + pending evidence).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("EVOHARNESS_AUTH", "off")

from service.embedded_redis import EmbeddedRedis  # noqa: E402

ROOM = ["go to countertop 1", "go to fridge 1", "go to sinkbasin 1", "look", "inventory"]
RESPONSES = ["<think>worth keeping</think><action>note [apples are often on countertops; clean at sinkbasin]</action>",
             "<think>move</think><action>look</action>", "<think>move</think><action>look</action>",
             "<think>move</think><action>look</action>"]


def obs(i: int) -> str:
    return (f"You arrive at countertop {i % 5 + 1}. On the countertop {i % 5 + 1}, you see a apple {i % 7 + 1}, "
            f"a mug {i + 1}, and a knife {i % 3 + 1}.")


async def key_bytes(r, pattern: str) -> int:
    total = 0
    async for k in r.scan_iter(match=pattern, count=1000):
        total += await r.memory_usage(k) or 0
    return total


async def run(redis_url: str, steps: int, episodes: int) -> None:
    from service.api.app import create_app
    from service.policy.engines.scripted import ScriptedEngine
    from service.settings import Settings

    async def client(ns: str):
        app = create_app(Settings(redis_url=redis_url, namespace=ns, engine="scripted", harness_cap=1),
                         engine=ScriptedEngine(RESPONSES))
        ctx = app.router.lifespan_context(app)
        await ctx.__aenter__()
        return app, ctx, httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://b")

    # table 1: one long session
    app, ctx, c = await client("one")
    r = app.state.sessions.docs.r
    sid = (await c.post("/v1/sessions", json={"task": "put a clean apple in fridge", "domain": "alfworld",
                                              "max_steps": steps * 3})).json()["session_id"]
    print(f"{'step':>5} {'version':>7} {'state B':>9} {'audit B':>9} {'all keys B':>10} {'B/step':>7}")
    for i in range(1, steps + 1):
        resp = await c.post(f"/v1/sessions/{sid}/step", json={"observation": obs(i), "admissible_actions": ROOM},
                            headers={"Idempotency-Key": f"k{i}"})
        assert resp.status_code == 200, resp.text
        if i in (1, 10, 50, 100, 150, 200) or i == steps:
            key = lambda p: f"one:{{s:{sid}}}:{p}"  # noqa: E731
            st, ev = await r.memory_usage(key("state")), await r.memory_usage(key("events"))
            total = await key_bytes(r, f"one:{{s:{sid}}}:*")
            print(f"{i:>5} {resp.json()['version']:>7} {st:>9} {ev:>9} {total:>10} {total // i:>7}", flush=True)
    await c.aclose()
    await ctx.__aexit__(None, None, None)

    # table 2: the bank over episodes, with and without consolidation
    per = max(1, steps // episodes)
    rows = {}
    for arm in ("none", "every episode"):
        ns = "nocons" if arm == "none" else "cons"
        app, ctx, c = await client(ns)
        r = app.state.sessions.docs.r
        rows[arm] = []
        for e in range(episodes):
            sid = (await c.post("/v1/sessions", json={"task": "put a clean apple in fridge", "domain": "alfworld",
                                                      "bank": "b"})).json()["session_id"]
            for i in range(per):
                resp = await c.post(f"/v1/sessions/{sid}/step", json={"observation": obs(e * per + i),
                                                                      "admissible_actions": ROOM})
                assert resp.status_code == 200, resp.text
            await c.post(f"/v1/sessions/{sid}/end", json={"won": e % 2 == 0})
            if arm != "none":
                assert (await c.post("/v1/banks/b/consolidate")).status_code == 200
            bank = (await c.get("/v1/banks/b")).json()
            n_entries = sum(len(v) for v in bank.get("entries", {}).values()) if isinstance(
                bank.get("entries"), dict) else len(bank.get("entries", []))
            rows[arm].append((await key_bytes(r, f"{ns}:{{b:*"), n_entries))
        await c.aclose()
        await ctx.__aexit__(None, None, None)
    print(f"\n{'episode':>7} | {'bank B, no consolidation':>24} | {'bank B, consolidated':>20} {'entries':>7}")
    for e in range(episodes):
        print(f"{e + 1:>7} | {rows['none'][e][0]:>24} | {rows['every episode'][e][0]:>20} "
              f"{rows['every episode'][e][1]:>7}")


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--episodes", type=int, default=10)
    args = ap.parse_args()
    with EmbeddedRedis() as redis:
        asyncio.run(run(redis.url, args.steps, args.episodes))


if __name__ == "__main__":
    main()
