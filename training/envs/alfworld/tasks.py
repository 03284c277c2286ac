"""Task sampling: which object, receptacle and lamp a game of each of the six ALFWorld task types is about.

The rules follow ALFRED's: heat uses the microwave, cool the fridge, clean a sink basin, look-at-in-light a lamp of
the room; the goal receptacle is never the appliance itself, and the target must fit the goal receptacle.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from service.domains.alfworld_text import TASK_TYPES as TASK_TYPES  # one list of task types: the domain's

from .rooms import Room, constants

SHORT_NAMES = {"pick_and_place_simple": "pick", "look_at_obj_in_light": "look",
               "pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "heat",
               "pick_cool_then_place_in_recep": "cool", "pick_two_obj_and_place": "pick_two"}
# Appliance each state-change task needs, and the affordance table the target must be in.
TOOL = {"pick_clean_then_place_in_recep": ("SinkBasin", "Cleanable"),
        "pick_heat_then_place_in_recep": ("Microwave", "Heatable"),
        "pick_cool_then_place_in_recep": ("Fridge", "Coolable")}


@dataclass(frozen=True)
class Task:
    task_type: str
    object_target: str
    parent_target: str = ""     # goal receptacle type ("" for look_at_obj_in_light)
    toggle_target: str = ""     # lamp type (look_at_obj_in_light only)

    @property
    def tool(self) -> str:
        return TOOL[self.task_type][0] if self.task_type in TOOL else ""

    def pddl_params(self) -> dict:
        return {"object_target": self.object_target, "parent_target": self.parent_target,
                "toggle_target": self.toggle_target, "mrecep_target": "", "object_sliced": False}


def _known(otype: str) -> bool:
    return otype in constants().OBJECTS


def candidate_tasks(room: Room, task_type: str) -> list[Task]:
    """Every task of ``task_type`` the room supports, in a stable order."""
    c = constants()
    objects = [o for o in room.object_types if _known(o)]
    if task_type == "look_at_obj_in_light":
        return [Task(task_type, o, "", lamp) for lamp in room.lamp_types for o in objects]
    tool = ""
    if task_type in TOOL:
        tool, table = TOOL[task_type]
        if tool not in room.receptacle_types:
            return []
        objects = [o for o in objects if o in c.VAL_ACTION_OBJECTS[table]]
    out = []
    for o in objects:
        for r in sorted(room.receptacle_types):
            if r == tool or not room.fits(o, r):
                continue
            # The target must start somewhere other than the goal receptacle (and the appliance).
            if not [h for h in room.homes_for(o) if h[0] not in (r, tool)]:
                continue
            out.append(Task(task_type, o, r))
    return out


def supports(room: Room, task_type: str) -> bool:
    return bool(candidate_tasks(room, task_type))


def sample_task(room: Room, task_type: str, rng: random.Random) -> Task:
    tasks = candidate_tasks(room, task_type)
    if not tasks:
        raise ValueError(f"{room.name} supports no {task_type} task")
    return rng.choice(tasks)
