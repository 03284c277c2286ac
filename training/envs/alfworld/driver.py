"""Episode driver shared by training and evaluation: play N games of a split against a policy and report.

    python -m training.envs.alfworld.driver --split fixtures --policy handcoded
    python -m training.envs.alfworld.driver --split valid_unseen --n 134 --policy planner --workers 2 --json out.json
    python -m training.envs.alfworld.driver --split fixtures --policy http --url http://127.0.0.1:8000 --api-key KEY

``--policy http`` plays against a running EvoHarness service (``--mode``, ``--bank``; ``--url`` and ``--api-key``
default to ``$EVOHARNESS_URL`` and ``$EVOHARNESS_API_KEY``): the one way to play ALFWorld games against the service.

Reports success % per task type, mean steps, harness calls and tokens, as JSON and as a printed table.
Splits other than ``fixtures`` are generated (or reused from ``data/alfworld/<split>``) first.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Protocol, runtime_checkable

from .episode import USAGE_KEYS, env_for, play_episode
from .policies import CallablePolicy, ExpertPolicy, HTTPPolicy
from .pool import EpisodePool
from .tasks import SHORT_NAMES, TASK_TYPES

__all__ = ["Policy", "ExpertPolicy", "CallablePolicy", "HTTPPolicy", "play_games", "summarize", "format_table",
           "split_games"]


@runtime_checkable
class Policy(Protocol):
    """What the driver plays. ``act`` is called once per environment step and once more with ``done=True``."""

    def reset(self, task: str, observation: str, admissible: list[str]) -> None: ...

    def act(self, observation: str, admissible: list[str], won: bool, done: bool) -> tuple[str, dict]: ...


def play_games(games, policy, max_steps: int = 50, workers: int = 1, keep_transcript: bool = False,
               progress: bool = False) -> list[dict]:
    """Play each game once. ``workers > 1`` uses :class:`.pool.EpisodePool` (the policy must be picklable)."""
    games = [Path(g) for g in games]
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(games), unit="game", desc="episodes")
    tick = (lambda _r: bar.update()) if bar else None
    try:
        if workers > 1:
            with EpisodePool(workers=workers, max_steps=max_steps) as pool:
                return pool.play(games, policy, keep_transcript=keep_transcript, on_result=tick)
        envs: dict = {}
        results = []
        for game in games:
            results.append(play_episode(env_for(policy, envs, max_steps), policy, game, keep_transcript))
            tick and tick(results[-1])
        for env in envs.values():
            env.close()
        return results
    finally:
        if bar:
            bar.close()


def summarize(results: list[dict]) -> dict:
    """Success %, mean steps and usage per task type and overall."""
    def block(rows: list[dict]) -> dict:
        n = len(rows)
        if not n:
            return {"games": 0}
        won = [r for r in rows if r["won"]]
        out = {"games": n, "won": len(won), "success_pct": round(100.0 * len(won) / n, 1),
               "mean_steps": round(sum(r["steps"] for r in rows) / n, 2),
               "mean_steps_won": round(sum(r["steps"] for r in won) / len(won), 2) if won else None}
        for key in USAGE_KEYS:
            total = sum(r.get(key, 0) for r in rows)
            out[f"total_{key}"] = total
            out[f"mean_{key}"] = round(total / n, 2)
        return out

    per_type = {t: block([r for r in results if r["task_type"] == t]) for t in TASK_TYPES}
    return {"overall": block(results), "per_task_type": {t: b for t, b in per_type.items() if b["games"]}}


def format_table(summary: dict, title: str = "") -> str:
    header = f"{'task type':<10} {'games':>5} {'success %':>9} {'steps':>6} {'harness':>8} {'prompt tok':>10} " \
             f"{'compl tok':>9}"
    lines = [title] if title else []
    lines += [header, "-" * len(header)]
    rows = [(SHORT_NAMES[t], b) for t, b in summary["per_task_type"].items()] + [("all", summary["overall"])]
    for name, b in rows:
        if not b.get("games"):
            continue
        lines.append(f"{name:<10} {b['games']:>5} {b['success_pct']:>9.1f} {b['mean_steps']:>6.1f} "
                     f"{b['mean_harness_calls']:>8.2f} {b['mean_prompt_tokens']:>10.1f} "
                     f"{b['mean_completion_tokens']:>9.1f}")
    return "\n".join(lines)


def split_games(split: str, n: int | None = None, out: Path | None = None, workers: int | None = None) -> list[Path]:
    """The first ``n`` games of a split (fixtures: the committed set; others: generated or cached)."""
    from .paths import DATA_ROOT, fixture_games

    if split == "fixtures":
        games = fixture_games()
    else:
        from .generate import generate_split
        manifest = generate_split(split, out=out, workers=workers)
        games = sorted(Path(out or DATA_ROOT) / split / g["game"] for g in manifest["games"])
    return games[:n] if n else games


def make_policy(args) -> object:
    if args.policy in ("planner", "handcoded"):
        return ExpertPolicy(args.policy)
    if args.policy == "http":
        headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else None
        return HTTPPolicy(args.url, mode=args.mode, bank=args.bank, headers=headers)
    raise ValueError(args.policy)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Play ALFWorld games against a policy and report.")
    parser.add_argument("--split", default="fixtures")
    parser.add_argument("--n", type=int, default=None, help="number of games (default: all)")
    parser.add_argument("--policy", choices=("planner", "handcoded", "http"), default="handcoded")
    parser.add_argument("--url", default=os.environ.get("EVOHARNESS_URL", "http://127.0.0.1:8000"),
                        help="the service (--policy http; default $EVOHARNESS_URL or http://127.0.0.1:8000)")
    parser.add_argument("--api-key", default=os.environ.get("EVOHARNESS_API_KEY"),
                        help="the service's API key (--policy http; default $EVOHARNESS_API_KEY)")
    parser.add_argument("--mode", default="inline")
    parser.add_argument("--bank", default="default")
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    parser.add_argument("--transcripts", action="store_true", help="keep every episode's transcript in the JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    games = split_games(args.split, args.n)
    started = time.perf_counter()
    results = play_games(games, make_policy(args), max_steps=args.max_steps, workers=args.workers,
                         keep_transcript=args.transcripts, progress=True)
    summary = summarize(results)
    report = {"split": args.split, "policy": args.policy, "max_steps": args.max_steps, "workers": args.workers,
              "seconds": round(time.perf_counter() - started, 2), "summary": summary, "episodes": results}
    print(format_table(summary, f"{args.split} / {args.policy} / {len(games)} games / {report['seconds']} s"))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    else:
        print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
