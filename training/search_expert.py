"""An ALFWorld expert that acts from any state, reading only the harness Belief (what the prompt has shown).

alfworld's ``handcoded`` expert keeps its own memory of one trajectory, so it cannot label states a learner reached
(DAgger), and parts of its choices depend on that memory. This expert is a pure function of the service's Belief
(``service.domains.alfworld`` perception of the observations so far), the task and the admissible actions:

* holding a goal object: treat it if the task says so (``clean|heat|cool X with R``), then for ``look`` tasks go to
  a known lamp and ``use`` it, else go to the goal receptacle (open it if closed) and ``move X to R``;
* holding anything else: put it back where it is;
* otherwise take a goal object that is not yet in place: where it is in view, or walk to where it was seen; if none
  is known, search: the next receptacle whose contents are unknown, receptacle types that usually hold the object
  class first (alfworld's affordance table), in the room's listing order; open a closed one on arrival.

It never closes what it opened (that only spends steps). Every returned action is admissible (``look`` if nothing
else fits).
"""

from __future__ import annotations

import functools

from service.domains.alfworld_text import OPENABLE_TYPES, entity_type

TREATMENT = {
    "pick_clean_then_place_in_recep": ("clean", "cleaned", ("sinkbasin", "bathtubbasin")),
    "pick_heat_then_place_in_recep": ("heat", "heated", ("microwave",)),
    "pick_cool_then_place_in_recep": ("cool", "cooled", ("fridge",)),
}


@functools.lru_cache(maxsize=1)
def _priors() -> dict[str, set[str]]:
    """object type -> receptacle types that can hold it (alfworld.gen.constants, lower-cased)."""
    import alfworld.gen.constants as c

    out: dict[str, set[str]] = {}
    for recep, objects in c.VAL_RECEPTACLE_OBJECTS.items():
        for obj in objects:
            out.setdefault(obj.lower(), set()).add(recep.lower())
    return out


def _receptacles(belief: dict) -> list[str]:
    return [n for n, e in belief.get("entities", {}).items() if e.get("kind") == "receptacle"]


def _objects_of(belief: dict, kind: str | None) -> list[tuple[str, dict]]:
    return [(n, e) for n, e in belief.get("entities", {}).items()
            if e.get("kind") == "object" and kind and entity_type(n) == kind]


class SearchExpert:
    """``act(belief, admissible) -> action``; stateless, so it can label any state."""

    def act(self, belief: dict, admissible: list[str]) -> str:
        goal = belief.get("goal") or {}
        task_type = belief.get("task_type")
        allowed = set(admissible)
        for action in self._wanted(belief, goal, task_type):
            if action in allowed:
                return action
            # a wanted action that is not admissible yet: the receptacle may be closed
            loc = belief.get("location")
            if loc and f"open {loc}" in allowed and not action.startswith("go to "):
                return f"open {loc}"
        return "look" if "look" in allowed else admissible[0]

    # ---------------------------------------------------------------- the rules, in order of preference
    def _wanted(self, belief: dict, goal: dict, task_type: str | None) -> list[str]:
        loc = belief.get("location")
        holding = list(belief.get("holding") or [])
        ents = belief.get("entities", {})
        if holding:
            held = holding[0]
            if entity_type(held) != goal.get("object"):
                return [f"move {held} to {loc}"] if loc else []
            attrs = (ents.get(held) or {}).get("attrs") or {}
            treat = TREATMENT.get(task_type)
            if treat and not attrs.get(treat[1]):
                verb, _, kinds = treat
                place = self._first_of(belief, kinds)
                if place is None:
                    return self._search(belief, kinds[0])
                return [f"{verb} {held} with {place}"] if loc == place else [f"go to {place}"]
            if task_type == "look_at_obj_in_light":
                lamps = _objects_of(belief, goal.get("toggle"))
                at = next((e.get("at") for _, e in lamps if e.get("at")), None)
                if at is None:
                    return self._search(belief, goal.get("toggle"))
                return [f"use {lamps[0][0]}"] if loc == at else [f"go to {at}"]
            target = self._first_of(belief, (goal.get("receptacle"),))
            if target is None:
                return self._search(belief, goal.get("receptacle"), receptacle=True)
            if loc != target:
                return [f"go to {target}"]
            if (ents.get(target) or {}).get("attrs", {}).get("open") is False:
                return [f"open {target}"]
            return [f"move {held} to {target}"]
        for name, ent in self._wanted_objects(belief, goal, task_type):
            at = ent.get("at")
            if at == loc:
                return [f"take {name} from {at}"]
            return [f"go to {at}"]
        return self._search(belief, goal.get("object"))

    def _wanted_objects(self, belief: dict, goal: dict, task_type: str | None) -> list[tuple[str, dict]]:
        """Known goal objects that still have to be moved (not already in a goal receptacle), nearest first."""
        recep_kind = goal.get("receptacle")
        out = []
        for name, ent in _objects_of(belief, goal.get("object")):
            at = ent.get("at")
            if not at:
                continue
            if task_type != "look_at_obj_in_light" and recep_kind and entity_type(at) == recep_kind:
                continue   # already placed
            out.append((name, ent))
        loc = belief.get("location")
        return sorted(out, key=lambda ne: ne[1].get("at") != loc)

    def _first_of(self, belief: dict, kinds) -> str | None:
        for kind in kinds:
            for r in _receptacles(belief):
                if entity_type(r) == kind:
                    return r
        return None

    def _search(self, belief: dict, kind: str | None, receptacle: bool = False) -> list[str]:
        """Next step of the search for an object (or receptacle) type."""
        ents = belief.get("entities", {})
        loc = belief.get("location")
        if loc and ents.get(loc, {}).get("kind") == "receptacle":
            here = ents[loc]
            if not here.get("contents_known") and entity_type(loc) in OPENABLE_TYPES:
                return [f"open {loc}"]
        likely = _priors().get(kind or "", set())
        todo = [r for r in _receptacles(belief) if not ents[r].get("contents_known") and r != loc]
        todo.sort(key=lambda r: entity_type(r) not in likely)   # stable: listing order within each group
        return [f"go to {r}" for r in todo[:1]]
