"""Split definitions mirroring the ALFWorld benchmark, and the per-game plan (room and task type) for each.

* ``train`` (600 games) and ``valid_seen`` (140) use alfworld's training rooms (``TRAIN_SCENE_NUMBERS``);
  ``valid_seen`` only draws from rooms that the train split actually uses.
* ``valid_unseen`` (134) uses alfworld's held-out rooms (``TEST_SCENE_NUMBERS``), never used by train.
* ``fixtures`` (12, two per task type) is the small committed test set, from the smallest rooms.

Task-type mixes: valid_seen and valid_unseen copy the benchmark's per-type counts, train is the benchmark's training
mix scaled to 600. Planning is cheap (no planner): it only picks a room and a task type per game from the seed.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from .rooms import all_room_numbers, constants, load_room
from .tasks import TASK_TYPES, supports

P, L, C, H, K, T = TASK_TYPES  # pick, look, clean, heat, cool, pick_two


@dataclass(frozen=True)
class SplitConfig:
    name: str
    count: int
    seed: int
    rooms: str                 # "train", "seen" (rooms used by train), "unseen" or "small"
    mix: dict                  # task type -> games when count is the default


SPLITS = {
    "train": SplitConfig("train", 600, 1001, "train", {P: 133, L: 52, C: 110, H: 78, K: 90, T: 137}),
    "valid_seen": SplitConfig("valid_seen", 140, 2002, "seen", {P: 35, L: 13, C: 27, H: 16, K: 25, T: 24}),
    "valid_unseen": SplitConfig("valid_unseen", 134, 3003, "unseen", {P: 24, L: 18, C: 31, H: 23, K: 21, T: 17}),
    "fixtures": SplitConfig("fixtures", 12, 4004, "small", {t: 2 for t in TASK_TYPES}),
}
SMALL_ROOMS_PER_TYPE = 3


@dataclass(frozen=True)
class GameSpec:
    split: str
    index: int
    seed: int
    room: int
    task_type: str

    def to_dict(self) -> dict:
        return asdict(self)


def scaled_mix(mix: dict, count: int) -> dict:
    """Per-type counts for ``count`` games, proportional to ``mix`` (largest remainder, stable order)."""
    total = sum(mix.values())
    exact = {t: mix[t] * count / total for t in TASK_TYPES}
    out = {t: int(v) for t, v in exact.items()}
    rest = sorted(TASK_TYPES, key=lambda t: (-(exact[t] - out[t]), TASK_TYPES.index(t)))
    for t in rest[: count - sum(out.values())]:
        out[t] += 1
    return out


def train_rooms() -> list[int]:
    return sorted(constants().TRAIN_SCENE_NUMBERS)


def unseen_rooms() -> list[int]:
    return sorted(constants().TEST_SCENE_NUMBERS)


def room_pool(config: SplitConfig) -> list[int]:
    if config.rooms == "train":
        return train_rooms()
    if config.rooms == "unseen":
        return unseen_rooms()
    if config.rooms == "seen":
        return sorted({spec.room for spec in plan_split("train")})
    if config.rooms == "small":
        return all_room_numbers()
    raise ValueError(config.rooms)


def plan_split(split: str, count: int | None = None, seed: int | None = None) -> list[GameSpec]:
    """Room and task type of every game of ``split``; deterministic for (split, count, seed)."""
    config = SPLITS[split]
    count = config.count if count is None else count
    seed = config.seed if seed is None else seed
    rng = random.Random(f"plan/{split}/{seed}")
    mix = config.mix if count == config.count else scaled_mix(config.mix, count)
    types = [t for t in TASK_TYPES for _ in range(mix[t])]
    rng.shuffle(types)
    pool = room_pool(config)
    eligible = {t: [n for n in pool if supports(load_room(n), t)] for t in TASK_TYPES}
    if config.rooms == "small":  # the few smallest rooms that support each type keep the fixtures light
        eligible = {t: sorted(ns, key=lambda n: (len(load_room(n).receptacles), n))[:SMALL_ROOMS_PER_TYPE]
                    for t, ns in eligible.items()}
    return [GameSpec(split, i, seed, rng.choice(eligible[t]), t) for i, t in enumerate(types)]
