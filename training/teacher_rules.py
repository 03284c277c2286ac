"""When the teacher calls a harness verb: documented rules that make each call useful.

Subgoals follow the domain's own progress wording (``service.domains.alfworld.progress_events``):
``take X`` → [``clean|heat|cool X``] → ``put X in|on R`` (pick-two: twice), look tasks ``take X`` →
``turn on <lamp>``. The teacher's ``think`` is the current subgoal (a few words).

Rules (``inline`` mode only; at most the harness cap per step, checked by the caller):

1. ``recall [obj]`` on the first turn when the bank holds a search priority for the goal object
   (``where:<obj>`` entry) — the result names where that object usually is. With a ``recall_share`` below 1 only
   that share of the episodes recalls (drawn per game), so skipping the recall is a choice the data shows too.
2. ``commit [subgoal]`` on the first turn, and again each time the current subgoal is reached (its progress event
   appears in the last observation) — the Plan panel then shows what to do next. With a ``commit_share`` below 1
   only that share of the later subgoal changes is committed (drawn per change, seeded by the game); at the others
   the next environment turn's think names the new subgoal itself, so the data shows both ways to move on.
   ``first_commit_share`` does the same for the first turn's commit (at the others the first think names the first
   subgoal), so no commit is the only way to start.
   ``commit_episode_share`` draws once per episode instead: that share commits as above, the others never commit,
   so an episode's turns agree on one style (with or without commits) from its first turn on.
3. ``track [obj]`` right before the expert walks to a receptacle where a goal object was seen (for a look task that
   holds its object: the lamp), when that sighting has left the state's history window of recent steps — the
   belief still knows it, and the answer sits next to the decision instead of far back in the transcript.
4. ``note [avoid <action>]`` after an action that failed ("Nothing happens.") — proposes a mistake entry.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field

from service.domains import get_domain
from service.domains.alfworld import receptacle_rel

ARG_MAX = 48
FAILED = "Nothing happens."


def subgoals_for(goal: dict, task_type: str | None, belief: dict) -> list[str]:
    obj, recep, lamp = goal.get("object"), goal.get("receptacle"), goal.get("toggle")
    if not obj:
        return []
    take = f"take {obj}"
    if task_type == "look_at_obj_in_light":
        return [take, f"turn on {lamp or 'desklamp'}"]
    put = f"put {obj} {receptacle_rel(belief, recep or '')} {recep}" if recep else None
    treat = {"pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "heat",
             "pick_cool_then_place_in_recep": "cool"}.get(task_type or "")
    plan = [take] + ([f"{treat} {obj}"] if treat else []) + ([put] if put else [])
    if task_type == "pick_two_obj_and_place":
        plan = plan * 2
    return plan


@dataclass
class RuleState:
    """The teacher's private bookkeeping for one episode."""

    goal_object: str | None
    subgoals: list[str]
    index: int = 0
    turns: int = 0
    tracked: set = field(default_factory=set)
    advanced: bool = False
    commit_share: float = 1.0                     # share of the later subgoal changes that get a commit (rule 2)
    first_commit_share: float = 1.0               # share of the episodes whose first turn commits (rule 2)
    recall_share: float = 1.0                     # share of the episodes that recall when the bank knows (rule 1)
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    @classmethod
    def for_task(cls, state: dict, commit_share: float = 1.0, game: str = "",
                 first_commit_share: float = 1.0, recall_share: float = 1.0,
                 commit_episode_share: float = 1.0) -> RuleState:
        """``commit_episode_share`` below 1 draws the commit style once per game (rule 2): that share of the
        episodes keeps the commit shares given, the others commit nothing (each think still names the subgoal)."""
        belief = state["belief"]
        goal = belief.get("goal") or {}
        rng = random.Random(zlib.crc32(game.encode()))
        if commit_episode_share < 1 and rng.random() >= commit_episode_share:
            commit_share = first_commit_share = 0.0
        return cls(goal.get("object"), subgoals_for(goal, belief.get("task_type"), belief),
                   commit_share=commit_share, first_commit_share=first_commit_share, recall_share=recall_share,
                   rng=rng)

    @property
    def current(self) -> str:
        if not self.subgoals:
            return "explore"
        return self.subgoals[min(self.index, len(self.subgoals) - 1)]


def _clip(text: str) -> str:
    return "".join(c for c in text if c not in "[]\\<>")[:ARG_MAX].strip()


def update_progress(rules: RuleState, state: dict) -> None:
    """Advance the subgoal index when the last observation reached the current subgoal."""
    rules.advanced = False
    if not state["history"] or rules.index >= len(rules.subgoals):
        return
    last = state["history"][-1]
    events = get_domain("alfworld").progress_events(state["belief"], last["observation"], last["action"])
    if any(e == rules.current or rules.current.startswith(e) for e in events):
        rules.index += 1
        rules.advanced = rules.index < len(rules.subgoals)


def _seen_in_window(state: dict, recep: str) -> bool:
    return any(recep in h["action"] or recep in h["observation"] for h in state["history"])


def _sought(rules: RuleState, belief: dict) -> str | None:
    """The object type the expert walks towards: the lamp once a look task holds its object, else the goal."""
    lamp = (belief.get("goal") or {}).get("toggle")
    if belief.get("task_type") == "look_at_obj_in_light" and lamp and belief.get("holding"):
        return lamp
    return rules.goal_object


def _track_target(rules: RuleState, state: dict, next_action: str) -> str | None:
    if not next_action.startswith("go to ") or not rules.goal_object:
        return None
    target = next_action[len("go to "):]
    sought = _sought(rules, state["belief"])
    ents = state["belief"].get("entities", {})
    here = [n for n, e in ents.items() if e.get("kind") == "object" and e.get("at") == target
            and n.rsplit(" ", 1)[0] == sought]
    if here and (sought, target) not in rules.tracked and not _seen_in_window(state, target):
        rules.tracked.add((sought, target))
        return sought
    return None


def harness_calls(rules: RuleState, state: dict, bank_entries: dict, next_action: str) -> list[tuple[str, str, str]]:
    """(verb, arg, think) calls to make before ``next_action`` in this state; updates ``rules``."""
    update_progress(rules, state)
    calls = []
    obj = rules.goal_object
    if rules.turns == 0:
        if (obj and any(e.get("key") == f"where:{obj}" for e in bank_entries.values())
                and (rules.recall_share >= 1 or rules.rng.random() < rules.recall_share)):
            calls.append(("recall", obj, f"where is {obj} usually"))
        if rules.subgoals and (rules.first_commit_share >= 1 or rules.rng.random() < rules.first_commit_share):
            calls.append(("commit", rules.current, f"start: {rules.current}"))
    else:
        last = state["history"][-1] if state["history"] else None
        if last and last["observation"].strip() == FAILED:
            calls.append(("note", _clip(f"avoid {last['action']}"), "that failed"))
        if rules.advanced and (rules.commit_share >= 1 or rules.rng.random() < rules.commit_share):
            calls.append(("commit", rules.current, f"next: {rules.current}"))
        tracked = _track_target(rules, state, next_action)
        if tracked:
            calls.append(("track", tracked, f"where was {tracked}"))
    rules.turns += 1
    return calls


def env_think(rules: RuleState, state: dict) -> str:
    """The think of an environment action: the current subgoal."""
    return rules.current


def observe_rules(rules: RuleState, state: dict) -> None:
    """For modes without verbs: keep the subgoal index in step with the observations."""
    update_progress(rules, state)
    rules.turns += 1
