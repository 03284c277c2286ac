"""python -m training.envs.alfworld.generate --split valid_unseen [--out DIR] [--workers N] [--count N] [--seed S]

Generate ALFWorld games offline from the floor plans and tables shipped with alfworld. Settings: ``GenerateConfig``
(``--help`` lists them; ``--config FILE.json`` reads them from a file, see ``training.cli``).

Writes ``<out>/<split>/<index>-<task_type>-<object>-<receptacle>-<room>/{traj_data.json,game.tw-pddl}`` (default
``data/alfworld``) and ``manifest.json``. Each game is checked solvable by the Fast Downward planner, whose plan is
replayed until won and stored as the walkthrough; a game the planner cannot solve is resampled (same room and task
type, new placements). With ``--no-verify`` (the pipeline's train games) the planner is skipped: each spec's first
sample is written as it is, ``solvable`` unknown and no walkthrough, about 0.3 s a game instead of 3-7 s. The search
expert plays those games, and only its wins become training episodes, so the planner's check adds nothing there; the
evaluation splits stay verified. A split whose manifest matches (seed, count, generator version, verification) is
reused from disk.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from training import cli

from .gamefiles import domain_and_grammar, grammar_with_task, read_traj, write_game
from .paths import DATA_ROOT, GAME_FILE, ensure_alfworld_home
from .problem import problem_pddl
from .rooms import load_room
from .scene import sample_scene
from .splits import SPLITS, GameSpec, plan_split
from .tasks import sample_task

GENERATOR_VERSION = 1
MAX_ATTEMPTS = 8
MAX_TIMEOUTS = 2  # planner timeouts after which a spec is skipped (recorded in the manifest) instead of resampled


def game_name(spec: GameSpec, task) -> str:
    target = task.parent_target or task.toggle_target
    return f"{spec.index:04d}-{spec.task_type}-{task.object_target}-{target}-{spec.room}"


def build_game(spec: GameSpec, attempt: int = 0) -> tuple[str, dict, dict]:
    """(folder name, traj_data, game data without walkthrough) for one attempt at a spec; no planner involved."""
    key = f"{spec.split}/{spec.seed}/{spec.index}/{attempt}"
    rng = random.Random(key)
    room = load_room(spec.room)
    task = sample_task(room, spec.task_type, rng)
    scene = sample_scene(room, task, rng)
    name = game_name(spec, task)
    traj = {
        "task_type": spec.task_type,
        "task_id": f"{spec.split}-{spec.index:04d}",
        "pddl_params": task.pddl_params(),
        "scene": {"floor_plan": room.name, "scene_num": room.number, "room_kind": room.kind,
                  "objects": [p.oid for p in scene.placements]},
        "generator": {"name": "evoharness.alfworld", "version": GENERATOR_VERSION, "attempt": attempt,
                      "spec": spec.to_dict()},
    }
    grammar, task_text = grammar_with_task(traj, seed=key)
    traj["turk_annotations"] = {"anns": [{"task_desc": task_text, "high_descs": [], "votes": []}]}
    domain, _ = domain_and_grammar()
    game = {"pddl_domain": domain, "grammar": grammar,
            "pddl_problem": problem_pddl(scene, f"plan_{spec.split}_{spec.index}"), "solvable": False}
    return name, traj, game


PLAN_TIMEOUT_S = 90.0  # Fast Downward's search can blow up (pick-two in large rooms); such a game is resampled


class PlanTimeout(RuntimeError):
    """The planner did not answer within the time limit."""


def plan_and_verify(game_path: Path, timeout_s: float | None = PLAN_TIMEOUT_S) -> list[str] | None:
    """Ask Fast Downward for a plan, replay it on the real engine; the plan if it wins, else None.

    The search runs inside the C++ extension, which no Python signal interrupts, so with ``timeout_s`` it runs in a
    forked child that is killed when the time is up (``PlanTimeout``; the attempt is resampled, and after
    ``MAX_TIMEOUTS`` the spec is skipped). The limit is generous (most games plan in 0.5-4 s) so that a split's content
    does not depend on machine speed.
    """
    if not timeout_s:
        return _plan_and_verify(game_path)
    # os.fork, not multiprocessing.Process: the generator's pool workers are daemonic and may not start children
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: plan, send the JSON answer, exit without running the parent's cleanup
        code = 0
        try:
            os.close(read_fd)
            with os.fdopen(write_fd, "w") as w:
                w.write(json.dumps(_plan_and_verify(game_path)))
        except BaseException:  # noqa: BLE001 - the child must always reach os._exit
            code = 1
        os._exit(code)
    os.close(write_fd)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise PlanTimeout(f"no plan within {timeout_s:.0f} s for {game_path}")
        with os.fdopen(read_fd, "r") as r:
            text = r.read()
        read_fd = -1
        return json.loads(text) if text else None
    finally:
        if read_fd >= 0:
            os.close(read_fd)


def _plan_and_verify(game_path: Path) -> list[str] | None:
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler

    infos = textworld.EnvInfos(won=True, admissible_commands=True, policy_commands=True)
    env = textworld.start(str(game_path), request_infos=infos, wrappers=[AlfredDemangler()])
    try:
        state = env.reset()
        plan = list(state["policy_commands"] or [])
        if not plan or state["won"]:
            return None
        infos.policy_commands = False  # the replay needs no replanning
        for command in plan:
            if command not in state["admissible_commands"]:
                return None
            state, _, _ = env.step(command)
        return plan if state["won"] else None
    finally:
        env.close()


def generate_game(spec: GameSpec, out: Path, verify: bool = True) -> dict:
    """Generate, check (``verify``: the planner's plan replayed until won) and write one game; its manifest record."""
    ensure_alfworld_home()
    from . import patches
    patches.apply("memoize_templates")  # same text, ~4x faster replay
    started = time.perf_counter()
    if not verify:
        return _write_unverified(spec, out, started)
    for attempt in range(MAX_ATTEMPTS):   # a resumed run: the attempt that was solved may not be the first
        existing = _cached_record(out / build_game(spec, attempt)[0], spec)
        if existing:
            return existing
    timeouts = 0
    for attempt in range(MAX_ATTEMPTS):
        name, traj, game = build_game(spec, attempt)
        folder = out / name
        tmp = out / f".tmp-{name}-{os.getpid()}"
        try:
            try:
                plan = plan_and_verify(write_game(tmp, traj, game))
            except PlanTimeout:
                timeouts += 1
                if timeouts >= MAX_TIMEOUTS:
                    return {"game": None, "skipped": f"{spec.index:04d}-{spec.task_type}-{spec.room}",
                            "reason": f"planner timed out {timeouts}x", "task_type": spec.task_type,
                            "room": spec.room}
                continue
            if plan is None:
                continue
            game["solvable"], game["walkthrough"] = True, plan
            write_game(tmp, traj, game)
            _remove(folder)
            tmp.rename(folder)
        finally:
            _remove(tmp)
        return {"game": name, "task_type": spec.task_type, "room": spec.room, "attempts": attempt + 1,
                "plan_steps": len(plan), "seconds": round(time.perf_counter() - started, 3)}
    raise RuntimeError(f"no solvable game for {spec} after {MAX_ATTEMPTS} attempts")


def _write_unverified(spec: GameSpec, out: Path, started: float) -> dict:
    """The spec's first sample, written without asking the planner (``solvable`` stays false, no walkthrough)."""
    name, traj, game = build_game(spec, 0)
    folder = out / name
    record = {"game": name, "task_type": spec.task_type, "room": spec.room, "attempts": 1, "plan_steps": None,
              "verified": False}
    if _cached_record(folder, spec, verified=False):
        return {**record, "seconds": 0.0, "cached": True}
    tmp = out / f".tmp-{name}-{os.getpid()}"
    try:
        write_game(tmp, traj, game)
        _remove(folder)
        tmp.rename(folder)
    finally:
        _remove(tmp)
    return {**record, "seconds": round(time.perf_counter() - started, 3)}


def _remove(folder: Path) -> None:
    if folder.exists():
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()


def _cached_record(folder: Path, spec: GameSpec, verified: bool = True) -> dict | None:
    if not (folder / GAME_FILE).exists():
        return None
    try:
        traj = read_traj(folder)
        game = json.loads((folder / GAME_FILE).read_text())
    except (OSError, ValueError):
        return None
    gen = traj.get("generator", {})
    if gen.get("version") != GENERATOR_VERSION or gen.get("spec") != spec.to_dict():
        return None
    if verified and not game.get("solvable") or not verified and gen.get("attempt") != 0:
        return None
    return {"game": folder.name, "task_type": spec.task_type, "room": spec.room, "attempts": gen["attempt"] + 1,
            "plan_steps": len(game.get("walkthrough", [])), "seconds": 0.0, "cached": True}


def _worker(args: tuple[GameSpec, str, bool]) -> dict:
    spec, out, verify = args
    return generate_game(spec, Path(out), verify)


def generate_split(split: str, out: Path | str | None = None, workers: int | None = None, count: int | None = None,
                   seed: int | None = None, progress: bool = True, first: int | None = None,
                   verify: bool = True) -> dict:
    """Generate (or reuse from disk) a whole split, or the first ``first`` games of its plan; returns the manifest.
    ``verify=False`` skips the planner (see the module docstring).

    Games already on disk for the same spec are reused one by one, so an interrupted run resumes where it stopped."""
    ensure_alfworld_home()
    out_dir = Path(out or DATA_ROOT) / split
    plan = plan_split(split, count=count, seed=seed)
    specs = plan[:first] if first else plan
    seed = plan[0].seed if plan else SPLITS[split].seed
    manifest_path = out_dir / "manifest.json"
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if (manifest.get("version"), manifest.get("seed"), manifest.get("plan_count", manifest.get("count")),
                manifest.get("count"), manifest.get("verified", True)) == (GENERATOR_VERSION, seed, len(plan),
                                                                            len(specs), verify) \
                and all((out_dir / g["game"] / GAME_FILE).exists() for g in manifest["games"]) \
                and not manifest.get("skipped"):   # a planner timeout is the box's load: a rerun tries again
            manifest["cached"] = True
            return manifest
    out_dir.mkdir(parents=True, exist_ok=True)
    workers = max(1, min(workers or os.cpu_count() or 1, len(specs) or 1))
    started = time.perf_counter()
    from tqdm import tqdm

    jobs = [(spec, str(out_dir), verify) for spec in specs]
    bar = tqdm(total=len(jobs), desc=f"alfworld {split}", unit="game", disable=not progress)
    records = []
    if workers == 1:
        for job in jobs:
            records.append(_worker(job))
            bar.update()
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for record in pool.imap_unordered(_worker, jobs):
                records.append(record)
                bar.update()
    bar.close()
    skipped = sorted((r for r in records if r.get("game") is None), key=lambda r: r["skipped"])
    records = sorted((r for r in records if r.get("game") is not None), key=lambda r: r["game"])
    manifest = {"split": split, "seed": seed, "count": len(specs), "plan_count": len(plan),
                "version": GENERATOR_VERSION, "verified": verify, "workers": workers,
                "seconds": round(time.perf_counter() - started, 2),
                "games": records, "skipped": skipped}
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


@dataclass
class GenerateConfig:
    """Generation settings."""

    split: str = field(metadata={"help": "split to generate", "choices": sorted(SPLITS)})
    out: Path | None = field(default=None, metadata={"help": "parent folder (default data/alfworld)"})
    workers: int | None = field(default=None, metadata={"help": "processes (default: CPU count)"})
    count: int | None = field(default=None, metadata={"help": "games (default: the split's size)"})
    seed: int | None = field(default=None, metadata={"help": "seed (default: the split's)"})
    first: int | None = field(default=None, metadata={
        "help": "only the first N games of the --count plan (the task-type mix of a plan depends on its count)"})
    verify: bool = field(default=True, metadata={
        "help": "check each game with the planner and resample the unsolvable (--no-verify: the first sample of each "
                "spec as it is, for train games the search expert plays)"})


def parse_args(argv: list[str] | None = None) -> GenerateConfig:
    return cli.parse(GenerateConfig, argv, __doc__)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    manifest = generate_split(args.split, args.out, args.workers, args.count, args.seed, first=args.first,
                              verify=args.verify)
    games = manifest["games"]
    for skip in manifest.get("skipped", []):
        print(f"skipped {skip['skipped']}: {skip['reason']}")
    where = Path(args.out or DATA_ROOT) / args.split
    took = "cached" if manifest.get("cached") else f"{manifest['seconds']} s"
    if args.verify:
        plan = sum(g["plan_steps"] for g in games) / max(1, len(games))
        print(f"{args.split}: {len(games)} solvable games in {where} ({took}, mean plan {plan:.1f} steps)")
    else:
        print(f"{args.split}: {len(games)} games, not checked by the planner, in {where} ({took})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
