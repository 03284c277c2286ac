"""python -m training.teacher --games-dir data/alfworld/train --out data/teacher

Teacher data: expert ALFWorld trajectories rendered through the service's own turn code. Settings: ``TeacherConfig``
(``--help`` lists them; ``--config FILE.json`` reads them from a file, see ``training.cli``).

    CPU:  python -m training.teacher --split train --out data/teacher            # all three modes
    GPU:  same command (no accelerator involved)

Two stages:

1. ``collect``: an expert plays each game and we keep the raw environment trajectory (task, observation,
   admissible actions, expert action per step). The default expert is :mod:`training.search_expert`, which acts
   from the harness Belief alone (so it can also label states a learner reached, see :mod:`training.dagger`);
   ``--expert handcoded`` uses alfworld's own handcoded expert (planner fallback with ``--planner-fallback``).
2. ``render``: each trajectory is replayed into a fresh harness state per mode, *only* through
   ``service.harness.observe``, ``service.policy.turns.prepare_turn`` and ``apply_decision`` — the prompts are the
   exact bytes the service sends to its engine. ``inline`` inserts harness verbs by :mod:`training.teacher_rules`;
   ``always_on`` and ``env_only`` emit environment actions only (the renderer adds or hides the panels).

The Experience bank evolves during rendering exactly as in the service: each window of ``window`` finished episodes
is consolidated by ``service.bank.evolver.consolidate`` (evidence from ``service.bank.evidence.evidence_of``).

Output, per mode: ``<out>/<mode>.jsonl`` rows ``{"prompt", "completion", "mode", "kind", "verb", "game", "admissible",
"verbs", "source"}`` (one per turn, in episode order; source: the trajectory's expert, ``dagger`` for a learner's
states) where ``completion = format_response(think, action) + "<|im_end|>"``.
Prompts are the episode so far (``service.policy.render``), so each turn's prompt extends the previous turn's prompt
and completion: ``training.sft`` trains a whole episode as one sequence. ``<out>/stats.json`` has the harness share.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from service.bank.evidence import evidence_of
from service.bank.evolver import consolidate, new_bank
from service.domains import get_domain
from service.harness import new_state, observe
from service.harness.state import MODES
from service.policy.parse import parse
from service.policy.turns import apply_decision, prepare_turn
from service.policy.wire import IM_END, format_response
from training import cli
from training.teacher_rules import RuleState, env_think, harness_calls, observe_rules

RAW_NAMES = {"handcoded": "expert", "walkthrough": "walkthrough", "search": "search"}  # raw trajectory file prefix


@dataclass
class TeacherConfig:
    """Teacher settings."""

    split: str = field(default="train", metadata={"help": "ALFWorld split whose games the expert plays"})
    n_games: int | None = field(default=None, metadata={"help": "first N games (all when not given)",
                                                         "aliases": ["--n"]})
    first_game: int = field(default=0, metadata={
        "help": "index of the first game played (with n_games: games first_game .. first_game+n_games-1)"})
    out: str = field(default="data/teacher", metadata={"help": "output folder"})
    max_env_steps: int = field(default=50, metadata={"help": "expert step budget per game"})
    window: int = field(default=8, metadata={"help": "episodes per bank consolidation window"})
    initial_bank: str | None = field(default=None, metadata={
        "help": "bank.json the Experience bank starts from (default: empty), e.g. the bank a policy is served with, "
                "so that held-out episodes recall what a served episode recalls"})
    harness_cap: int = field(default=3, metadata={"help": "harness calls allowed per step (as the service default)"})
    commit_share: float = field(default=1.0, metadata={
        "help": "share of the subgoal changes after the first turn that the inline teacher commits (drawn per "
                "change, seeded by the game); at the others the next think names the new subgoal. 1 = every change"})
    first_commit_share: float = field(default=1.0, metadata={
        "help": "share of the episodes whose first turn the inline teacher commits (drawn per game); at the others "
                "the first think names the first subgoal. 1 = every episode"})
    commit_episode_share: float = field(default=1.0, metadata={
        "help": "share of the episodes rendered with commits (drawn once per game; commit_share and "
                "first_commit_share apply inside them); the others commit nothing, so each episode keeps one style "
                "from its first turn on. 1 = every episode"})
    recall_share: float = field(default=1.0, metadata={
        "help": "share of the episodes that recall on their first turn when the bank knows the goal object (drawn "
                "per game); the others start without it. 1 = every such episode"})
    keep_lost: bool = field(default=False, metadata={"help": "keep trajectories the expert did not win"})
    games_dir: str | None = field(default=None, metadata={
        "help": "play every finished game folder under this path (e.g. a split being generated) instead of a split"})
    expert: str = field(default="search", metadata={
        "help": "search (training.search_expert: acts from Belief), handcoded (alfworld's, planner fallback) or "
                "walkthrough (the stored planner plan)", "choices": tuple(RAW_NAMES)})
    merge_walkthrough: bool = field(default=True, metadata={
        "help": "fill games the handcoded expert has not played with walkthrough replays"})
    render_only: bool = field(default=False, metadata={"help": "skip collection; render what is on disk"})
    shard: str | None = field(default=None, metadata={
        "help": "i/k: collect only every k-th game from i (parallel collectors; render afterwards with --render-only)"})
    planner_fallback: bool = field(default=False, metadata={
        "help": "replay a game the handcoded expert lost with the planner (off: Fast Downward can search for "
                "minutes on pick-two games in large rooms, and its privileged plans walk straight to hidden "
                "objects, which a policy cannot copy)"})


# -------------------------------------------------------------------------------------------- collect
def collect(games, max_env_steps: int = 50, planner_fallback: bool = False):
    """Play each game with the handcoded expert (optionally the planner when it loses); yield raw trajectories."""
    from training.envs.alfworld.env import AlfWorldEnv

    envs = {}
    try:
        for game in games:
            for expert in ("handcoded", "planner") if planner_fallback else ("handcoded",):
                if expert not in envs:
                    envs[expert] = AlfWorldEnv(expert_type=expert, max_steps=max_env_steps)
                traj = _play(envs[expert], game)
                traj["expert"] = expert
                if traj["won"]:
                    break
            yield traj
    finally:
        for env in envs.values():
            env.close()


def collect_walkthrough(games, max_env_steps: int = 50):
    """Cheaper fallback: replay the planner plan stored in each game at generation time (no expert wrapper).

    The planner is privileged (it walks straight to hidden objects), so these trajectories search less than the
    handcoded expert's; ``run`` uses them only for games the handcoded expert has not played yet.
    """
    from training.envs.alfworld.env import AlfWorldEnv

    env = AlfWorldEnv(expert_type=None, max_steps=max_env_steps)
    try:
        for game in games:
            env.reset(game)
            plan = env.walkthrough()
            traj = _play(env, game, plan)
            traj["expert"] = "walkthrough"
            yield traj
    finally:
        env.close()


def collect_search(games, max_env_steps: int = 50):
    """Play each game with ``training.search_expert.SearchExpert``, which reads only the Belief that perception
    builds from the observations so far (so its choices are predictable from the prompt)."""
    from service.domains import get_domain
    from training.envs.alfworld.env import AlfWorldEnv
    from training.search_expert import SearchExpert

    env, expert, domain = AlfWorldEnv(expert_type=None, max_steps=max_env_steps), SearchExpert(), get_domain("alfworld")
    try:
        for game in games:
            seen = {"belief": None}

            def act(st: dict, last_action: str | None, seen: dict = seen) -> str:
                before = seen["belief"] or domain.initial_belief(st["task_text"])
                seen["belief"] = domain.perceive(before, st["observation"], last_action)
                return expert.act(seen["belief"], st["admissible_actions"])

            traj = _play(env, game, act=act)
            traj["expert"] = "search"
            yield traj
    finally:
        env.close()


def _play(env, game, plan: list[str] | None = None, act=None) -> dict:
    st = env.reset(game)
    task = st["task"]
    steps = [{"observation": st["observation"], "admissible": st["admissible_actions"], "won": False}]
    actions = []
    while not st["done"]:
        if plan is not None:
            if len(actions) >= len(plan):
                break
            action = plan[len(actions)]
        elif act is not None:
            action = act({**st, "task_text": task}, actions[-1] if actions else None)
        else:
            action = (env.expert_plan or ["look"])[0]
        actions.append(action)
        st = env.step(action)
        steps.append({"observation": st["observation"], "admissible": st["admissible_actions"], "won": st["won"]})
    return {"game": Path(game).name, "task_text": task, "task_type": env.traj_data.get("task_type", ""),
            "won": bool(env.won), "steps": steps, "actions": actions}


# -------------------------------------------------------------------------------------------- render
def render_episode(traj: dict, mode: str, bank: dict, harness_cap: int = 3,
                   commit_share: float = 1.0, first_commit_share: float = 1.0,
                   recall_share: float = 1.0, commit_episode_share: float = 1.0) -> tuple[list[dict], dict]:
    """Replay one trajectory into a harness state of ``mode``; returns (samples, evidence)."""
    domain = get_domain("alfworld")
    task = traj["task_text"]
    state = new_state(task=task, domain="alfworld", mode=mode, bank="memory",
                      initial_belief=domain.initial_belief(task), harness_cap=harness_cap)
    state["belief"]["task_type"] = domain.task_type(task)
    rules = RuleState.for_task(state, commit_share, traj["game"], first_commit_share, recall_share,
                               commit_episode_share)
    entries, controls = bank["entries"], bank.get("controls")
    samples = []

    def emit(think: str, action: str, kind: str, verb: str | None, target: str | None = None):
        """One turn: the sample's completion names ``target`` (the expert's label) when given; the state moves on
        with ``action`` (what was executed)."""
        nonlocal state
        ti = prepare_turn(state, entries, controls)
        completion = format_response(think, target or action)
        parse(completion, state["admissible"], ti.verbs)  # the teacher obeys the parser too
        samples.append({"prompt": ti.prompt, "completion": completion + IM_END, "mode": mode, "kind": kind,
                        "verb": verb, "game": traj["game"], "admissible": state["admissible"], "verbs": ti.verbs,
                        "source": traj["expert"]})
        decision = parse(format_response(think, action), state["admissible"], ti.verbs)
        state, result = apply_decision(state, decision, domain, entries, ti)
        return result

    labels = traj.get("labels")  # DAgger: the expert's label for each state the learner reached
    for i, action in enumerate(traj["actions"]):
        target = labels[i] if labels else action
        step = traj["steps"][i]
        state = observe(state, domain, step["observation"], step["admissible"], step["won"])
        if mode == "inline":
            for verb, arg, think in harness_calls(rules, state, entries, target):
                if verb not in prepare_turn(state, entries, controls).verbs:
                    break
                emit(think, f"{verb} [{arg}]", "harness", verb)
        else:
            observe_rules(rules, state)
        emit(env_think(rules, state), action, "env", None, target)
    last = traj["steps"][-1]
    state = observe(state, domain, last["observation"], last["admissible"], last["won"])
    return samples, evidence_of(state, bool(last["won"]))


def render_mode(trajs: list[dict], mode: str, window: int = 8, harness_cap: int = 3,
                commit_share: float = 1.0, bank: dict | None = None,
                first_commit_share: float = 1.0, recall_share: float = 1.0,
                commit_episode_share: float = 1.0) -> tuple[list[dict], dict]:
    """Render all trajectories in order, consolidating the bank (``bank``, default empty) every ``window``
    episodes."""
    bank, pending, samples, stamp = bank or new_bank(), [], [], 0
    for traj in trajs:
        rows, ev = render_episode(traj, mode, bank, harness_cap, commit_share, first_commit_share, recall_share,
                                  commit_episode_share)
        samples += rows
        pending.append({**ev, "session_id": f"{stamp:04d}-{traj['game']}"})
        if len(pending) >= window:
            stamp += 1
            bank, _ = consolidate(bank, pending, stamp)
            pending = []
    if pending:
        bank, _ = consolidate(bank, pending, stamp + 1)
    return samples, bank


def share_stats(samples: list[dict]) -> dict:
    harness = [s for s in samples if s["kind"] == "harness"]
    by_verb: dict[str, int] = {}
    for s in harness:
        by_verb[s["verb"]] = by_verb.get(s["verb"], 0) + 1
    episodes = len({(s["game"], s.get("source")) for s in samples}) or 1   # a game's expert and DAgger episodes
    return {"turns": len(samples), "harness_turns": len(harness),
            "harness_share": round(len(harness) / max(1, len(samples)), 4),
            "harness_per_episode": round(len(harness) / episodes, 2), "by_verb": by_verb, "episodes": episodes}


def parse_args(argv: list[str] | None = None) -> TeacherConfig:
    return cli.parse(TeacherConfig, argv, __doc__)


def main(argv: list[str] | None = None) -> int:
    run(parse_args(argv))
    return 0


def run(cfg: TeacherConfig) -> dict:
    from training.envs.alfworld.driver import split_games

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    raw_name = RAW_NAMES[cfg.expert]
    shard = "." + cfg.shard.replace("/", "of") if cfg.shard else ""
    raw_path = out / f"{raw_name}-{cfg.split}{shard}.jsonl"
    trajs = [json.loads(line) for line in raw_path.read_text().splitlines()] if raw_path.exists() else []
    done = {t["game"] for t in trajs}
    if cfg.games_dir:
        from training.envs.alfworld.paths import list_games
        games = [g for g in list_games(cfg.games_dir) if not g.name.startswith(".")]
    else:
        games = split_games(cfg.split)
    games = games[cfg.first_game:][:cfg.n_games]
    if cfg.shard:  # "i/k": every k-th game from i (parallel collectors write separate files)
        i, k = map(int, cfg.shard.split("/"))
        games = games[i::k]
    todo = [g for g in games if Path(g).name not in done]
    with raw_path.open("a") as f:  # incremental: games already collected are skipped
        if cfg.expert == "walkthrough":
            trajs_in = collect_walkthrough(todo, cfg.max_env_steps)
        elif cfg.expert == "search":
            trajs_in = collect_search(todo, cfg.max_env_steps)
        else:
            trajs_in = collect(todo, cfg.max_env_steps, cfg.planner_fallback)
        for traj in trajs_in if not cfg.render_only else []:
            f.write(json.dumps(traj) + "\n")
            f.flush()
            trajs.append(traj)
    if cfg.shard:
        return {"collected": len(trajs), "file": str(raw_path)}   # a collector shard: render once all are in
    # every shard file of this expert (a sharded collection renders with --render-only afterwards)
    files = sorted(out.glob(f"{raw_name}-{cfg.split}*.jsonl")) + sorted(out.glob(f"dagger-{cfg.split}*.jsonl"))
    trajs = list({(t["game"], t["expert"], t.get("round")): t
                  for f in files for t in map(json.loads, f.read_text().splitlines())}.values())
    trajs.sort(key=lambda t: (t["game"], t.get("round") or 0))
    walk_files = sorted(out.glob(f"walkthrough-{cfg.split}*.jsonl"))
    if cfg.merge_walkthrough and cfg.expert == "handcoded" and walk_files:
        have = {t["game"] for t in trajs if t["won"]}
        walk = [json.loads(line) for f in walk_files for line in f.read_text().splitlines()]
        walk = list({t["game"]: t for t in walk}.values())
        trajs = [t for t in trajs if t["won"]] + [t for t in walk if t["game"] not in have]
        trajs.sort(key=lambda t: t["game"])
    kept = [t for t in trajs if t["won"] or cfg.keep_lost or "labels" in t]  # DAgger episodes teach recovery
    stats = {"games": len(trajs), "won_by_expert": sum(t["won"] for t in trajs),
             "experts": {e: sum(t["expert"] == e for t in trajs)
                         for e in ("search", "dagger", "handcoded", "planner", "walkthrough")},
             "modes": {}}
    for mode in MODES:
        start = json.loads(Path(cfg.initial_bank).read_text()) if cfg.initial_bank else None
        samples, bank = render_mode(kept, mode, cfg.window, cfg.harness_cap, cfg.commit_share, start,
                                    cfg.first_commit_share, cfg.recall_share, cfg.commit_episode_share)
        (out / f"{mode}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
        stats["modes"][mode] = {**share_stats(samples), "bank_entries": len(bank["entries"])}
        if mode == "inline":
            (out / "bank.json").write_text(json.dumps(bank, indent=1))
    stats["seconds"] = round(time.perf_counter() - started, 1)
    (out / "stats.json").write_text(json.dumps(stats, indent=1))
    print(json.dumps(stats, indent=1))
    return stats


if __name__ == "__main__":
    raise SystemExit(main())
