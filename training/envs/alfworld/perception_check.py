"""Perception check: the ALFWorld domain's Belief against the engine's ground truth.

An expert (``planner`` or ``handcoded``) plays each game of a split on the real TextWorld PDDL
engine. After every step the domain's rule-based perception updates Belief from the observation
text only; the engine's PDDL facts (``inReceptacle``, ``holds``, ``opened``, ``isCool``...) give
the truth. Both are turned into comparable fact tuples:

    ("recep", r)        r is a receptacle of the room          truth: any receptacle of the game
    ("loc", r)          the agent stands at r                  atLocation + receptacleAtLocation
    ("holds", o)        the agent carries o                    holds(agent, o)
    ("in", o, r)        o is in/on r                           inReceptacle(o, r)
    ("open", r)         r is open                              openable(r) & opened(r)
    ("closed", r)       r is closed                            openable(r) & not opened(r)
    ("cooled"|"heated"|"cleaned"|"sliced"|"toggled", o)        isCool / isHot / isClean / isSliced / isToggled

precision = belief facts true in the world / belief facts;
recall    = seen true facts present in Belief / seen true facts (headline figures leave out the static
"recep" kind, reported on its own line), where *seen* is decided from the
ground truth alone: a receptacle's contents count once the agent has stood at it while it was
visible (not openable, or opened); open/closed once the agent has stood at it; attributes of objects
that have been inside a seen receptacle or in hand; location, hand and the room's receptacles always.
Scores are micro-averaged over every step of every episode (and reported per fact kind).

    python -m training.envs.alfworld.perception_check --split fixtures --expert handcoded
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

ATTR_PREDICATES = {"iscool": "cooled", "ishot": "heated", "isclean": "cleaned", "issliced": "sliced",
                   "istoggled": "toggled"}
BELIEF_ATTRS = tuple(ATTR_PREDICATES.values())
REPO = Path(__file__).resolve().parents[3]


# ------------------------------------------------------------------ ground truth

def _name(x: str) -> str:
    return re.sub(r"\s+", " ", str(x)).strip().lower()


def plain_facts(facts) -> list[list[str]]:
    """textworld Propositions (human-readable names) -> [[predicate, arg, ...], ...] (JSON-friendly)."""
    out = []
    for f in facts:
        names = getattr(f, "names", None)
        if names is None:
            names = [v.name for v in f.arguments]
        out.append([f.name] + [_name(n) for n in names])
    return out


class WorldView:
    """The parts of the PDDL state the Belief talks about."""

    def __init__(self, facts: list[list[str]]):
        self.recep_at: dict[str, list[str]] = {}
        self.agent_loc = None
        self.inrec: set[tuple[str, str]] = set()
        self.holds: set[str] = set()
        self.openable: set[str] = set()
        self.opened: set[str] = set()
        self.receptacles: set[str] = set()
        self.attrs: set[tuple[str, str]] = set()
        for pred, *args in facts:
            p = pred.lower()
            if p == "atlocation":
                self.agent_loc = args[1]
            elif p == "receptacleatlocation":
                self.recep_at.setdefault(args[1], []).append(args[0])
                self.receptacles.add(args[0])
            elif p == "inreceptacle":
                self.inrec.add((args[0], args[1]))
            elif p == "holds":
                self.holds.add(args[1])
            elif p == "openable":
                self.openable.add(args[0])
            elif p == "opened":
                self.opened.add(args[0])
            elif p in ATTR_PREDICATES:
                self.attrs.add((ATTR_PREDICATES[p], args[0]))

    @property
    def here(self) -> list[str]:
        return sorted(self.recep_at.get(self.agent_loc, []))

    def facts(self) -> set[tuple]:
        out = {("recep", r) for r in self.receptacles}
        out |= {("loc", r) for r in self.here}
        out |= {("holds", o) for o in self.holds}
        out |= {("in", o, r) for o, r in self.inrec}
        out |= {("open" if r in self.opened else "closed", r) for r in self.openable}
        out |= set(self.attrs)
        return out


class SeenTracker:
    """What the agent has had a chance to see, decided from the ground truth alone."""

    def __init__(self):
        self.visited: set[str] = set()
        self.observed: set[str] = set()
        self.objects: set[str] = set()

    def update(self, w: WorldView) -> None:
        for r in w.here:
            self.visited.add(r)
            if r not in w.openable or r in w.opened:
                self.observed.add(r)
        self.objects |= {o for o, r in w.inrec if r in self.observed} | w.holds

    def seen_facts(self, w: WorldView) -> set[tuple]:
        out = {("recep", r) for r in w.receptacles}
        out |= {("loc", r) for r in w.here}
        out |= {("holds", o) for o in w.holds}
        out |= {("in", o, r) for o, r in w.inrec if r in self.observed}
        out |= {("open" if r in w.opened else "closed", r) for r in w.openable if r in self.visited}
        out |= {(a, o) for a, o in w.attrs if o in self.objects}
        return out


def belief_facts(belief: dict) -> set[tuple]:
    out = set()
    if belief.get("location"):
        out.add(("loc", belief["location"]))
    out |= {("holds", o) for o in belief.get("holding", [])}
    for name, ent in belief.get("entities", {}).items():
        attrs = ent.get("attrs") or {}
        if ent.get("kind") == "receptacle":
            out.add(("recep", name))
            if "open" in attrs:
                out.add(("open" if attrs["open"] else "closed", name))
        else:
            if ent.get("at") and ent.get("rel") in ("in", "on"):
                out.add(("in", name, ent["at"]))
            out |= {(a, name) for a in BELIEF_ATTRS if attrs.get(a)}
    return out


class Score:
    def __init__(self):
        self.tp_p = Counter()  # belief facts that are true
        self.n_b = Counter()   # belief facts
        self.tp_r = Counter()  # seen facts present in belief
        self.n_s = Counter()   # seen facts
        self.errors: Counter = Counter()

    def add(self, bel: set, truth: set, seen: set) -> None:
        for f in bel:
            self.n_b[f[0]] += 1
            if f in truth:
                self.tp_p[f[0]] += 1
            else:
                self.errors[("false", f[0])] += 1
        for f in seen:
            self.n_s[f[0]] += 1
            if f in bel:
                self.tp_r[f[0]] += 1
            else:
                self.errors[("missed", f[0])] += 1

    def merge(self, other: Score) -> None:
        for a in ("tp_p", "n_b", "tp_r", "n_s", "errors"):
            getattr(self, a).update(getattr(other, a))

    @staticmethod
    def _ratio(a, b):
        return round(a / b, 4) if b else 1.0

    def summary(self) -> dict:
        kinds = sorted(set(self.n_b) | set(self.n_s))
        # headline figures leave out the static room inventory ("recep"), which would swamp them
        dyn = [k for k in kinds if k != "recep"]
        return {
            "precision": self._ratio(sum(self.tp_p[k] for k in dyn), sum(self.n_b[k] for k in dyn)),
            "recall": self._ratio(sum(self.tp_r[k] for k in dyn), sum(self.n_s[k] for k in dyn)),
            "belief_facts": sum(self.n_b[k] for k in dyn),
            "seen_facts": sum(self.n_s[k] for k in dyn),
            "by_kind": {k: {"precision": self._ratio(self.tp_p[k], self.n_b[k]),
                            "recall": self._ratio(self.tp_r[k], self.n_s[k]),
                            "belief": self.n_b[k], "seen": self.n_s[k]} for k in kinds},
        }


def score_transcript(domain, task: str, steps: list[dict]) -> tuple[Score, list[dict]]:
    """steps: [{action, observation, facts}] with action None first. Returns (score, mismatch samples)."""
    score, samples = Score(), []
    seen = SeenTracker()
    belief = None
    for i, step in enumerate(steps):
        if i == 0:
            belief = domain.initial_belief(task, step["observation"])
        else:
            belief = domain.perceive(belief, step["observation"], step["action"])
        world = WorldView(step["facts"])
        seen.update(world)
        bel, truth, seen_f = belief_facts(belief), world.facts(), seen.seen_facts(world)
        score.add(bel, truth, seen_f)
        wrong, missed = sorted(bel - truth), sorted(seen_f - bel)
        if (wrong or missed) and len(samples) < 5:
            samples.append({"step": i, "action": step["action"], "observation": step["observation"],
                            "false": [list(f) for f in wrong][:5], "missed": [list(f) for f in missed][:5]})
    return score, samples


# ------------------------------------------------------------------ playing games

def _alfworld_home() -> None:
    """Importing alfworld creates ALFWORLD_DATA (~/.cache/alfworld by default): keep it in the project.
    Also applies the project's run-time alfworld patches (template memoisation, handcoded-expert fixes)."""
    try:
        from training.envs.alfworld import patches
        patches.apply()
    except ImportError:  # pragma: no cover - generator package absent: plain upstream engine
        os.environ.setdefault("ALFWORLD_DATA", str(REPO / "data" / "alfworld-home"))


def _task_of(observation: str) -> str:
    m = re.search(r"Your task is to:\s*(.*)", observation, re.S)
    return m.group(1).strip() if m else ""


def _move_to_put(command: str) -> str:
    # the handcoded expert only understands "put" for placing (upstream bug); the engine wants "move"
    m = re.match(r"^move (.+) to (.+)$", command)
    return f"put {m.group(1)} in/on {m.group(2)}" if m else command


# probes played after the expert's episode when recording fixtures: more kinds of engine text
PROBES = ("inventory", "examine {held}", "look", "examine {here}", "take nothing 1 from {here}")
STATIC_PREDICATES = {"receptacleatlocation", "openable"}
KEEP_PREDICATES = {"atlocation", "receptacleatlocation", "inreceptacle", "holds", "openable", "opened",
                   *ATTR_PREDICATES}


def record_episode(gamefile: str, expert: str = "handcoded", max_steps: int = 120,
                   extra_commands: tuple[str, ...] = (), replan: bool = False) -> dict:
    """Play one game with an expert on the TextWorld PDDL engine; keep text and PDDL facts per step.

    ``planner`` replays the game's stored walkthrough (the Fast Downward plan the generator verified) when
    there is one, which is the planner's own plan without re-planning every step; ``replan=True`` asks the
    live planner each step instead (slow: ~0.3 s to tens of seconds a step)."""
    _alfworld_home()
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredInfos

    class _Expert(AlfredExpert):
        failed = None

        def step(self, command):
            self.state, reward, done = textworld.core.Wrapper.step(self, command)
            self.prev_command = _move_to_put(str(command))
            try:
                self._gather_infos()
            except Exception as exc:  # the upstream handcoded expert can crash or time out: episode over
                self.failed = f"{type(exc).__name__}: {exc}"
                self.state["extra.expert_plan"] = []
            return self.state, reward, done

    infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=True, feedback=True,
                               extras=["gamefile", "expert_plan"])
    walkthrough = None
    if expert == "planner" and not replan:
        walkthrough = list(json.loads(Path(gamefile).read_text()).get("walkthrough") or []) or None
    wrappers = [AlfredDemangler(), AlfredInfos]
    wrapper = None
    rng = random.Random(str(Path(gamefile).parent.name)) if expert == "random" else None
    if rng is not None:
        infos.extras = ["gamefile"]
    elif walkthrough is None:
        wrapper = _Expert(expert_type=expert)
        wrappers.append(wrapper)
    else:
        infos.extras = ["gamefile"]
    env = textworld.start(gamefile, request_infos=infos, wrappers=wrappers)
    saved_random = random.getstate()
    random.seed(str(Path(gamefile).parent.name))  # the handcoded expert breaks ties with the global random
    try:
        state = env.reset()
        steps = [{"action": None, "observation": state["feedback"], "facts": plain_facts(state["facts"])}]
        won = bool(state["won"])
        while not won and len(steps) <= max_steps:
            if rng is not None:  # random admissible actions: messy transcripts for robustness
                plan = [rng.choice(sorted(state["admissible_commands"]))]
            else:
                plan = [walkthrough.pop(0)] if walkthrough else state.get("extra.expert_plan")
            if not plan:  # the expert gave up
                break
            action = plan[0]
            if action not in state["admissible_commands"]:
                alt = re.sub(r"^put (.+) in/on (.+)$", r"move \1 to \2", action)
                action = alt if alt in state["admissible_commands"] else action
            state, _, done = env.step(action)
            steps.append({"action": action, "observation": state["feedback"], "facts": plain_facts(state["facts"])})
            won = bool(state["won"])
            if done:
                break
        for action in extra_commands:  # probes after the episode ("{here}": the receptacle the agent is at)
            w = WorldView(steps[-1]["facts"])
            if "{here}" in action and not w.here or "{held}" in action and not w.holds:
                continue
            action = action.format(here=(w.here or [""])[0], held=min(w.holds) if w.holds else "")
            state, _, _ = env.step(action)
            steps.append({"action": action, "observation": state["feedback"], "facts": plain_facts(state["facts"])})
    finally:
        env.close()
        random.setstate(saved_random)
    return {"gamefile": str(gamefile), "expert": expert, "task": _task_of(steps[0]["observation"]),
            "won": won, "expert_error": wrapper.failed if wrapper else None, "steps": steps}


def fixture_record(ep: dict) -> dict:
    """A self-contained perception fixture: text, the relevant ground-truth facts per step, and the
    Belief the engine's truth implies at the end for what the agent has seen."""
    static = [f for f in ep["steps"][0]["facts"] if f[0] in STATIC_PREDICATES]
    steps = [{"action": st["action"], "observation": st["observation"],
              "facts": [f for f in st["facts"] if f[0] in KEEP_PREDICATES and f[0] not in STATIC_PREDICATES]}
             for st in ep["steps"]]
    seen = SeenTracker()
    for st in steps:
        w = WorldView(static + st["facts"])
        seen.update(w)
    placed = {o: [r, "in" if r in w.openable else "on"] for o, r in sorted(w.inrec) if r in seen.observed}
    placed.update({o: [None, "held"] for o in sorted(w.holds)})
    attrs: dict = {}
    for a, o in sorted(w.attrs):
        if o in seen.objects:
            attrs.setdefault(o, {})[a] = True
    traj = Path(ep["gamefile"]).parent / "traj_data.json"
    task_type = json.loads(traj.read_text())["task_type"] if traj.exists() else None
    return {
        "game": os.path.relpath(ep["gamefile"], REPO) if ep["gamefile"].startswith(str(REPO)) else ep["gamefile"],
        "expert": ep["expert"], "task": ep["task"], "won": ep["won"], "static_facts": static, "steps": steps,
        "expect": {"task_type": task_type, "location": (w.here or [None])[0], "holding": sorted(w.holds),
                   "placed": placed, "attrs": attrs},
    }


def fixture_steps(rec: dict) -> list[dict]:
    """Steps of a fixture with the static facts merged back in (the form `score_transcript` takes)."""
    static = rec.get("static_facts", [])
    return [{**st, "facts": static + st["facts"]} for st in rec["steps"]]


def dump_fixture(rec: dict) -> str:
    """JSON text with one line per step (readable diffs, small files)."""
    head = json.dumps({k: v for k, v in rec.items() if k not in ("steps", "static_facts")}, indent=1)
    static = json.dumps(rec["static_facts"])
    steps = ",\n".join("  " + json.dumps(st) for st in rec["steps"])
    return head[:-2] + f',\n "static_facts": {static},\n "steps": [\n{steps}\n ]\n}}\n'


def find_games(split: str, root: str | None = None) -> list[str]:
    """Game files of a split: under `root` if given, else the committed fixtures or the generated split."""
    candidates = []
    if root:
        candidates += [Path(root) / split, Path(root)]
    try:
        from training.envs.alfworld import paths
        if split == "fixtures" and not root:
            return [str(paths.game_file(g)) for g in paths.fixture_games()]  # committed archive, unpacked once
        candidates.append(paths.split_dir(split))
    except ImportError:  # pragma: no cover - the generator package is optional here
        pass
    candidates.append(REPO / "tests" / "fixtures" / "alfworld" if split == "fixtures"
                      else REPO / "data" / "alfworld" / split)
    for c in candidates:
        games = sorted(str(p) for p in Path(c).rglob("game.tw-pddl")) if Path(c).is_dir() else []
        if games:
            return games
    raise FileNotFoundError(f"no games for split {split!r} under {[str(c) for c in candidates]}")


def run(split: str, expert: str, root: str | None = None, limit: int | None = None,
        max_steps: int = 120, verbose: bool = False, replan: bool = False) -> dict:
    from service.domains.alfworld import AlfworldDomain

    domain = AlfworldDomain()
    games = find_games(split, root)[: limit or None]
    total, per_game = Score(), []
    t0 = time.time()
    for g in games:
        ep = record_episode(g, expert, max_steps, replan=replan)
        score, samples = score_transcript(domain, ep["task"], ep["steps"])
        total.merge(score)
        s = score.summary()
        per_game.append({"game": os.path.relpath(g, REPO) if g.startswith(str(REPO)) else g, "won": ep["won"],
                         "steps": len(ep["steps"]) - 1, "precision": s["precision"], "recall": s["recall"],
                         "mismatches": samples})
        if verbose:
            print(f"{per_game[-1]['game']}: won={ep['won']} steps={per_game[-1]['steps']} "
                  f"P={s['precision']:.3f} R={s['recall']:.3f}", file=sys.stderr)
    out = {"split": split, "expert": expert, "games": len(games), "seconds": round(time.time() - t0, 1),
           **total.summary(), "per_game": per_game}
    return out


def _print_table(res: dict) -> None:
    print(f"perception check  split={res['split']}  expert={res['expert']}  games={res['games']}  "
          f"({res['seconds']} s)")
    print(f"{'fact kind':<10} {'precision':>9} {'recall':>7} {'belief':>7} {'seen':>7}")
    for k, v in res["by_kind"].items():
        print(f"{k:<10} {v['precision']:>9.4f} {v['recall']:>7.4f} {v['belief']:>7} {v['seen']:>7}")
    print(f"{'ALL-recep':<10} {res['precision']:>9.4f} {res['recall']:>7.4f} {res['belief_facts']:>7} "
          f"{res['seen_facts']:>7}")
    lost = [g["game"] for g in res["per_game"] if not g["won"]]
    if lost and res["expert"] != "random":
        print(f"expert did not win: {lost}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="fixtures", help="fixtures | train | valid_seen | valid_unseen")
    ap.add_argument("--expert", default="handcoded", choices=["planner", "handcoded", "random"],
                    help="random: seeded random admissible actions for --max-steps (robustness, not an expert)")
    ap.add_argument("--root", default=None, help="folder holding the split's game folders (overrides lookup)")
    ap.add_argument("--limit", type=int, default=None, help="play at most N games")
    ap.add_argument("--max-steps", type=int, default=120)
    ap.add_argument("--json", default=None, help="write the full report (with mismatch samples) here")
    ap.add_argument("--replan", action="store_true",
                    help="planner: ask Fast Downward every step instead of replaying the stored walkthrough")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--record", default=None, metavar="DIR",
                    help="instead of scoring, write one perception fixture (JSON) per game into DIR")
    args = ap.parse_args(argv)
    if args.record:
        out = Path(args.record)
        out.mkdir(parents=True, exist_ok=True)
        for g in find_games(args.split, args.root)[: args.limit or None]:
            ep = record_episode(g, args.expert, args.max_steps, extra_commands=PROBES,
                                replan=args.replan)
            rec = fixture_record(ep)
            name = f"{Path(g).parent.name}-{args.expert}.json"
            (out / name).write_text(dump_fixture(rec))
            print(f"{name}: won={ep['won']} steps={len(ep['steps']) - 1}")
        return 0
    res = run(args.split, args.expert, args.root, args.limit, args.max_steps, args.verbose, args.replan)
    _print_table(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
