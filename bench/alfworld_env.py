"""ALFWorld environment and generator throughput.

    ALFWORLD_DATA=$PWD/data/alfworld-home .venv-alf/bin/python bench/alfworld_env.py \\
        [--episodes 12] [--steps 30] [--gen 6]

Prints a table: ``env.step`` calls/s in one process (template memoisation on and off, with each expert), episode
throughput including game loads in one process and in a process pool (2 workers), and game generation time
(seconds per game, 1 and 2 workers). Episodes are random admissible actions with a fixed seed on the committed
fixture games.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.envs.alfworld import patches  # noqa: E402
from training.envs.alfworld.driver import ExpertPolicy, play_games  # noqa: E402
from training.envs.alfworld.paths import ensure_alfworld_home, fixture_games  # noqa: E402


class SeededRandomPolicy:
    """Random admissible actions, seeded per task so serial and pooled runs play the same moves."""

    def reset(self, task, observation, admissible):
        self.rng = random.Random(zlib.crc32(task.encode()))

    def act(self, observation, admissible, won, done):
        return ("" if done else self.rng.choice(admissible)), {}


def steps_per_second(games, policy, steps: int, workers: int = 1) -> tuple[float, float, int]:
    """(steps per second of env.step time, steps per wall second including game loads, steps)."""
    started = time.perf_counter()
    results = play_games(games, policy, max_steps=steps, workers=workers)
    elapsed = time.perf_counter() - started
    total = sum(r["steps"] for r in results)
    in_step = sum(r["step_seconds"] for r in results)
    return total / in_step, total / elapsed, total


def generation_seconds(count: int, workers: int) -> float:
    from training.envs.alfworld.generate import generate_split

    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        generate_split("valid_unseen", out=out, workers=workers, count=count, progress=False)
        return (time.perf_counter() - started) / count


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--steps", type=int, default=30, help="step budget per episode")
    parser.add_argument("--gen", type=int, default=6, help="games to generate per generation row (0: skip)")
    args = parser.parse_args()
    ensure_alfworld_home()
    games = (fixture_games() * 4)[: args.episodes]
    patches.apply()
    rows = []

    def row(name, value, unit, note=""):
        rows.append((name, value, unit, note))
        print(f"  {name}: {value:.2f} {unit} {note}", file=sys.stderr, flush=True)

    play_games(games[:1], SeededRandomPolicy(), max_steps=2)  # warm up imports and caches
    sps, wall, n = steps_per_second(games, SeededRandomPolicy(), args.steps)
    row("env.step/s, 1 process, memoised templates", sps, "steps/s", f"{n} steps")
    row("steps/s incl. game loads, 1 process", wall, "steps/s", f"{len(games)} episodes")
    with patches.disabled("memoize_templates"):
        sps, _, n = steps_per_second(games, SeededRandomPolicy(), args.steps)
    row("env.step/s, 1 process, upstream templates", sps, "steps/s", f"{n} steps")
    sps, wall, n = steps_per_second(games, SeededRandomPolicy(), args.steps, workers=2)
    row("steps/s incl. game loads, pool of 2", wall, "steps/s", f"{n} steps, {os.cpu_count()} CPUs")
    sps, _, n = steps_per_second(games, ExpertPolicy("handcoded"), args.steps)
    row("env.step/s with handcoded expert", sps, "steps/s", f"{n} steps")
    sps, _, n = steps_per_second(games, ExpertPolicy("planner"), args.steps)
    row("env.step/s with planner expert", sps, "steps/s", f"{n} steps (replans every step)")
    if args.gen:
        row("generation, 1 process", generation_seconds(args.gen, 1), "s/game", f"{args.gen} valid_unseen games")
        row("generation, 2 processes", generation_seconds(args.gen, 2), "s/game", f"{args.gen} valid_unseen games")

    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>8}  unit     note")
    for name, value, unit, note in rows:
        print(f"{name:<{width}}  {value:>8.2f}  {unit:<7}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
