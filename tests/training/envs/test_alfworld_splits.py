"""Splits: sizes, task mixes, and the room separation between train and the unseen split."""

from __future__ import annotations

from collections import Counter

from training.envs.alfworld.splits import SPLITS, plan_split, scaled_mix, train_rooms, unseen_rooms
from training.envs.alfworld.tasks import TASK_TYPES


def test_split_sizes_and_mixes():
    for name, size in (("train", 600), ("valid_seen", 140), ("valid_unseen", 134)):
        specs = plan_split(name)
        assert len(specs) == size
        assert Counter(s.task_type for s in specs) == Counter(SPLITS[name].mix)
        assert [s.index for s in specs] == list(range(size))


def test_unseen_rooms_are_disjoint_from_train():
    train = {s.room for s in plan_split("train")}
    unseen = {s.room for s in plan_split("valid_unseen")}
    assert unseen and train
    assert not train & unseen
    assert not set(train_rooms()) & set(unseen_rooms())
    assert unseen <= set(unseen_rooms())


def test_seen_rooms_are_rooms_used_in_train():
    train = {s.room for s in plan_split("train")}
    seen = {s.room for s in plan_split("valid_seen")}
    assert seen <= train


def test_plans_are_deterministic_per_seed():
    assert plan_split("valid_unseen") == plan_split("valid_unseen")
    assert plan_split("valid_unseen", seed=7) != plan_split("valid_unseen")
    assert plan_split("train", count=10) == plan_split("train", count=10)


def test_scaled_mix_keeps_the_total():
    for count in (1, 6, 10, 77, 600):
        mix = scaled_mix(SPLITS["train"].mix, count)
        assert sum(mix.values()) == count and set(mix) == set(TASK_TYPES)
