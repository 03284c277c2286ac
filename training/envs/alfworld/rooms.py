"""ALFRED floor plans shipped with alfworld, read as rooms: receptacle instances and the object types present.

Each ``FloorPlanN`` in ``alfworld/gen/layouts`` ships ``-objects.json`` (object and receptacle types in the room) and
``-openable.json`` (receptacle instances with their ALFRED ids). Receptacle types listed in the room but absent from
the instance table get a fixed count (:data:`DEFAULT_RECEPTACLE_COUNT`, stove burners 4, everything else 1).
The tables of which object fits which receptacle come from ``alfworld.gen.constants``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from .paths import ensure_alfworld_home

KIND_RANGES = {"Kitchen": range(1, 31), "LivingRoom": range(201, 231), "Bedroom": range(301, 331),
               "Bathroom": range(401, 431)}
DEFAULT_RECEPTACLE_COUNT = {"StoveBurner": 4}
# The instance table names the basin receptacles after their sink/bathtub; ALFRED's basin ids end in the basin type.
BASIN_OF = {"Sink": "SinkBasin", "Bathtub": "BathtubBasin"}
LAMP_TYPES = ("DeskLamp", "FloorLamp")
# Lamps are toggled where they stand; the PDDL domain needs them inside a receptacle, so they stand on one of these.
LAMP_SURFACES = ("SideTable", "Desk", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "CounterTop")


@functools.lru_cache(maxsize=1)
def constants():
    """alfworld's affordance tables (``alfworld.gen.constants``), imported lazily."""
    ensure_alfworld_home()
    import alfworld.gen.constants as c
    return c


@functools.lru_cache(maxsize=1)
def layouts_dir() -> Path:
    ensure_alfworld_home()
    import alfworld.gen
    return Path(alfworld.gen.__file__).parent / "layouts"


@functools.lru_cache(maxsize=1)
def static_receptacle_types() -> frozenset[str]:
    """Receptacle types that stay in place (the ones the agent goes to); movable ones (mug, bowl...) are objects."""
    c = constants()
    return frozenset(set(c.VAL_RECEPTACLE_OBJECTS) - set(c.MOVABLE_RECEPTACLES))


def kind_of(number: int) -> str:
    for kind, numbers in KIND_RANGES.items():
        if number in numbers:
            return kind
    raise ValueError(f"no ALFRED room FloorPlan{number}")


@dataclass(frozen=True)
class Room:
    number: int
    kind: str
    receptacles: tuple[tuple[str, str], ...]   # (receptacle type, ALFRED-style id), sorted
    object_types: tuple[str, ...]              # pickupable types that fit some receptacle of this room
    lamp_types: tuple[str, ...]                # toggleable lamps present

    @property
    def name(self) -> str:
        return f"FloorPlan{self.number}"

    @property
    def receptacle_types(self) -> frozenset[str]:
        return frozenset(t for t, _ in self.receptacles)

    def receptacles_of(self, rtype: str) -> list[str]:
        return [rid for t, rid in self.receptacles if t == rtype]

    def fits(self, otype: str, rtype: str) -> bool:
        return otype in constants().VAL_RECEPTACLE_OBJECTS.get(rtype, ())

    def homes_for(self, otype: str) -> list[tuple[str, str]]:
        """Receptacle instances of this room that can hold ``otype``."""
        return [(t, rid) for t, rid in self.receptacles if self.fits(otype, t)]

    def lamp_homes(self) -> list[tuple[str, str]]:
        return [(t, rid) for t, rid in self.receptacles if t in LAMP_SURFACES]


def all_room_numbers() -> list[int]:
    return sorted(int(p.name[len("FloorPlan"):-len("-objects.json")]) for p in layouts_dir().glob("*-objects.json"))


@functools.cache
def load_room(number: int) -> Room:
    folder = layouts_dir()
    present = set(json.loads((folder / f"FloorPlan{number}-objects.json").read_text()))
    instances = json.loads((folder / f"FloorPlan{number}-openable.json").read_text())
    static = static_receptacle_types()

    receptacles: list[tuple[str, str]] = []
    for rid in sorted(instances):
        rtype = rid.split("|", 1)[0]
        if rtype in BASIN_OF:
            rtype = BASIN_OF[rtype]
            rid = f"{rid}|{rtype}"
        if rtype in static:
            receptacles.append((rtype, rid))
    listed = {t for t, _ in receptacles}
    for rtype in sorted((present & static) - listed):
        basin_of = {basin: owner for owner, basin in BASIN_OF.items()}
        for k in range(DEFAULT_RECEPTACLE_COUNT.get(rtype, 1)):
            # Basin ids name their sink/bathtub first, as ALFRED's do: the demangler appends "basin" to those.
            rid = f"{basin_of[rtype]}|{number}|{k + 1}|{rtype}" if rtype in basin_of else f"{rtype}|{number}|{k + 1}"
            receptacles.append((rtype, rid))
    receptacles.sort()

    rtypes = {t for t, _ in receptacles}
    table = constants().VAL_RECEPTACLE_OBJECTS
    object_types = sorted(t for t in present - static
                          if t not in LAMP_TYPES and any(t in table[r] for r in rtypes))
    lamps = tuple(t for t in LAMP_TYPES if t in present and any(r in LAMP_SURFACES for r in rtypes))
    return Room(number, kind_of(number), tuple(receptacles), tuple(object_types), lamps)
