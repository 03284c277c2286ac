"""PDDL problem text for a scene, in the form alfworld's ``alfred.pddl`` domain and TextWorld's PDDL engine expect.

One location per receptacle instance and an empty start location for the agent (so the first observation is "You are
in the middle of a room"); ids use ALFRED's character mangling (``|`` -> ``_bar_`` ...) because alfworld's
demangler derives the display names ("cabinet 3", "sinkbasin 1") from them. The goal is alfworld's own goal
template for the task type (``alfworld.gen.goal_library``).
"""

from __future__ import annotations

from .rooms import constants
from .scene import Scene

OPENABLE = ("Fridge", "Cabinet", "Microwave", "Drawer", "Safe", "Box")
# Types the domain's actions name as constants (clean/heat/cool appliances, slicing tools).
DOMAIN_RTYPES = ("SinkBasin", "Microwave", "Fridge")
DOMAIN_OTYPES = ("Knife", "ButterKnife")
_MANGLE = (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_"))


def mangle(alfred_id: str) -> str:
    text = alfred_id
    for char, word in _MANGLE:
        text = text.replace(char, word)
    return text.lower()


def goal_pddl(scene: Scene) -> str:
    import alfworld.gen.goal_library as glib
    task = scene.task
    text = glib.gdict[task.task_type]["pddl"].format(obj=task.object_target, recep=task.parent_target,
                                                      toggle=task.toggle_target, mrecep="")
    return text.replace("#", "-").strip()


def problem_pddl(scene: Scene, name: str) -> str:
    c = constants()
    room, task = scene.room, scene.task
    openable_types = set(c.OPENABLE_CLASS_LIST) | set(OPENABLE)
    actions = c.VAL_ACTION_OBJECTS

    otypes = sorted({p.otype for p in scene.placements} | set(DOMAIN_OTYPES) | {task.object_target}
                    | ({task.toggle_target} - {""}))
    rtypes = sorted(room.receptacle_types | set(DOMAIN_RTYPES) | ({task.parent_target} - {""}))
    locations = {rid: f"loc_bar_{k + 1}" for k, (_, rid) in enumerate(room.receptacles)}
    start = "loc_bar_0"

    objects = ["agent1 - agent"]
    objects += [f"{t.lower()}type - otype" for t in otypes]
    objects += [f"{t.lower()}type - rtype" for t in rtypes]
    objects += [f"{loc} - location" for loc in [start, *locations.values()]]
    objects += [f"{mangle(rid)} - receptacle" for _, rid in room.receptacles]
    objects += [f"{mangle(p.oid)} - object" for p in scene.placements]

    init = [f"(atLocation agent1 {start})"]
    for rtype, rid in room.receptacles:
        r = mangle(rid)
        init.append(f"(receptacleAtLocation {r} {locations[rid]})")
        init.append(f"(receptacleType {r} {rtype.lower()}type)")
        if rtype in openable_types:
            init.append(f"(openable {r})")
    for p in scene.placements:
        o = mangle(p.oid)
        init.append(f"(objectType {o} {p.otype.lower()}type)")
        init.append(f"(inReceptacle {o} {mangle(p.rid)})")
        init.append(f"(objectAtLocation {o} {locations[p.rid]})")
        if p.otype in ("DeskLamp", "FloorLamp"):
            init.append(f"(toggleable {o})")
            continue
        init.append(f"(pickupable {o})")
        for flag, table in (("cleanable", "Cleanable"), ("heatable", "Heatable"), ("coolable", "Coolable"),
                            ("sliceable", "Sliceable")):
            if p.otype in actions[table]:
                init.append(f"({flag} {o})")
    for rtype in rtypes:
        for otype in otypes:
            if otype in c.VAL_RECEPTACLE_OBJECTS.get(rtype, ()):
                init.append(f"(canContain {rtype.lower()}type {otype.lower()}type)")

    pad = "\n        "
    return (f"(define (problem {name})\n    (:domain alfred)\n    (:objects{pad}{pad.join(objects)}\n    )\n"
            f"    (:init{pad}{pad.join(init)}\n    )\n    {goal_pddl(scene)}\n")
