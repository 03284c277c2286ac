"""Scene sampling: where the targets and the distractors of a game start, in which receptacle instance.

Targets get 1-3 instances (2-3 for pick-two), 6-14 distractor types of the room get 1-3 instances each; every
instance goes into a random receptacle instance that can hold its type. Targets never start in the goal receptacle
type or in the task's appliance, so no game is won (or half done) at the start.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .rooms import LAMP_TYPES, Room
from .tasks import Task

DISTRACTOR_TYPES = (6, 14)
INSTANCES = (1, 3)


@dataclass(frozen=True)
class Placement:
    otype: str
    oid: str        # ALFRED-style id, e.g. "Apple|10|2"
    rtype: str
    rid: str


@dataclass(frozen=True)
class Scene:
    room: Room
    task: Task
    placements: tuple[Placement, ...]


def sample_scene(room: Room, task: Task, rng: random.Random) -> Scene:
    placements: list[Placement] = []
    counter: dict[str, int] = {}

    def place(otype: str, homes: list[tuple[str, str]]) -> None:
        counter[otype] = counter.get(otype, 0) + 1
        rtype, rid = rng.choice(homes)
        placements.append(Placement(otype, f"{otype}|{room.number}|{counter[otype]}", rtype, rid))

    low = 2 if task.task_type == "pick_two_obj_and_place" else INSTANCES[0]
    avoid = {task.parent_target, task.tool} - {""}
    target_homes = [h for h in room.homes_for(task.object_target) if h[0] not in avoid]
    for _ in range(rng.randint(low, max(low, INSTANCES[1]))):
        place(task.object_target, target_homes)

    if task.toggle_target:
        place(task.toggle_target, room.lamp_homes())

    others = [o for o in room.object_types if o != task.object_target and o not in LAMP_TYPES]
    n_types = min(len(others), rng.randint(*DISTRACTOR_TYPES))
    for otype in sorted(rng.sample(others, n_types)):
        homes = room.homes_for(otype)
        for _ in range(rng.randint(*INSTANCES)):
            place(otype, homes)
    return Scene(room, task, tuple(placements))
