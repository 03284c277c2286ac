"""service.jsondiff: the RFC 6902 patches it makes rebuild the target exactly (checked with the jsonpatch library)."""

import copy
import json
import random

import jsonpatch
import pytest

from service.jsondiff import diff, equal

KEYS = ["a", "b", "c", "x/y", "t~1", "", "0", "history", "entities"]


def rand_scalar(rng):
    return rng.choice([None, True, False, 0, 1, 1.0, 2.5, -3, "", "s", "look", "go to fridge 1", "1", "true"])


def rand_doc(rng, depth=0):
    r = rng.random()
    if depth >= 4 or r < 0.35:
        return rand_scalar(rng)
    if r < 0.7:
        return {rng.choice(KEYS): rand_doc(rng, depth + 1) for _ in range(rng.randrange(0, 6))}
    return [rand_doc(rng, depth + 1) for _ in range(rng.randrange(0, 7))]


def mutate(rng, doc, depth=0):
    """A related document: a few edits, list appends, front removals and window shifts."""
    if isinstance(doc, dict):
        out = {k: (mutate(rng, v, depth + 1) if rng.random() < 0.4 else v) for k, v in doc.items()}
        for _ in range(rng.randrange(0, 3)):
            op = rng.random()
            if op < 0.4:
                out[rng.choice(KEYS)] = rand_doc(rng, depth + 1)
            elif op < 0.6 and out:
                out.pop(rng.choice(sorted(out)))
        return out
    if isinstance(doc, list):
        out = [mutate(rng, v, depth + 1) if rng.random() < 0.3 else v for v in doc]
        op = rng.random()
        if op < 0.25:
            out += [rand_doc(rng, depth + 1) for _ in range(rng.randrange(1, 3))]
        elif op < 0.45 and out:
            k = rng.randrange(1, len(out) + 1)
            out = out[k:] + [rand_doc(rng, depth + 1) for _ in range(rng.randrange(0, k + 1))]
        elif op < 0.6 and out:
            del out[rng.randrange(len(out))]
        elif op < 0.7:
            out.insert(rng.randrange(len(out) + 1), rand_doc(rng, depth + 1))
        return out
    return rand_doc(rng, depth) if rng.random() < 0.5 else doc


def check(a, b):
    a0, b0 = copy.deepcopy(a), copy.deepcopy(b)
    ops = diff(a, b)
    assert a == a0 and b == b0                                   # inputs untouched
    json.dumps(ops)                                              # serialisable
    for op in ops:
        assert op["op"] in ("add", "remove", "replace") and isinstance(op["path"], str)
    got = jsonpatch.apply_patch(copy.deepcopy(a), ops)
    assert equal(got, b), (a, b, ops)
    assert json.dumps(got, sort_keys=True) == json.dumps(b, sort_keys=True)
    return ops


@pytest.mark.parametrize("seed", range(40))
def test_random_documents_rebuild(seed):
    rng = random.Random(seed)
    for _ in range(100):
        a = {"root": rand_doc(rng)}
        check(a, mutate(rng, a))
        check(a, {"root": rand_doc(rng)})


def test_equal_documents_give_an_empty_patch():
    doc = {"a": [1, {"b": [True, None]}], "c": "x"}
    assert diff(doc, copy.deepcopy(doc)) == []
    assert diff(doc, doc) == []


def test_types_are_strict():
    assert check({"v": 1}, {"v": True}) == [{"op": "replace", "path": "/v", "value": True}]
    assert check({"v": 0}, {"v": False})
    assert check({"v": 1}, {"v": 1.0})
    assert check([1, 2], [True, 2])
    assert check({"v": {"w": 1}}, {"v": {"w": True}})
    assert not equal({"a": [1]}, {"a": [True]}) and equal({"a": [1.5]}, {"a": [1.5]})


def test_root_and_escaped_keys():
    check([1], {"a": 1})
    check({"a/b": 1, "c~d": 2}, {"a/b": 2, "e~/": 3})


def test_sliding_window_is_a_shift():
    a = {"history": [{"action": f"a{i}", "observation": f"o{i}"} for i in range(6)]}
    b = {"history": a["history"][1:] + [{"action": "a6", "observation": "o6"}]}
    ops = check(a, b)
    assert [o["op"] for o in ops] == ["remove", "add"]
    assert ops[0]["path"] == "/history/0" and ops[1]["path"] == "/history/5"


def test_append_is_one_add():
    ops = check({"l": [1, 2]}, {"l": [1, 2, 3]})
    assert ops == [{"op": "add", "path": "/l/2", "value": 3}]


def test_harness_state_steps():
    from service.domains import get_domain
    from service.harness import apply_env_action, apply_verb, new_state, observe

    dom = get_domain("alfworld")
    task = "put a clean apple in fridge"
    s = new_state(task=task, domain="alfworld", mode="inline", bank="default", initial_belief=dom.initial_belief(task))
    obs = [("You are in the middle of a room. Looking quickly around you, you see a countertop 1, a fridge 1, "
            "and a sinkbasin 1."),
           "You arrive at countertop 1. On the countertop 1, you see a apple 1, a knife 2, and a mug 1.",
           "You pick up the apple 1 from the countertop 1.",
           "You arrive at fridge 1. The fridge 1 is closed.",
           "You open the fridge 1. The fridge 1 is open. In it, you see a egg 1."]
    acts = ["go to countertop 1", "take apple 1 from countertop 1", "go to fridge 1", "open fridge 1", "look"]
    for i in range(20):
        o = observe(s, dom, obs[i % len(obs)], acts)
        check(s, o)
        if i % 3 == 0:
            h, _ = apply_verb(o, dom, "commit", f"goal {i}")
            check(o, h)
            o = h
        e = apply_env_action(o, acts[i % len(acts)])
        check(o, e)
        check(s, e)
        s = e
