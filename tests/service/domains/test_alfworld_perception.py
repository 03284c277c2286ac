"""ALFWorld perception: text parsing, Belief updates, track, task types, progress events.

The first part uses single observations in the exact wording of ALFWorld's grammar (alfred.twl2);
the second replays real transcripts recorded from the TextWorld engine (tests/fixtures/perception/).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from service.domains import DOMAINS, Domain
from service.domains.alfworld import AlfworldDomain
from service.domains.alfworld_text import parse_action, parse_observation, parse_task, split_list

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "perception"

INTRO = (
    "-= Welcome to TextWorld, ALFRED! =-\n\n"
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 2, a cabinet 1, "
    "a countertop 1, a drawer 1, a fridge 1, a microwave 1, a sinkbasin 1, a stoveburner 3, and a toaster 1.\n\n"
    "Your task is to: put a cool apple in countertop."
)


@pytest.fixture()
def dom() -> AlfworldDomain:
    return AlfworldDomain()


def play(dom, steps, belief):
    for action, obs in steps:
        belief = dom.perceive(belief, obs, action)
    return belief


# ---------------------------------------------------------------- text level

def test_split_list_forms():
    assert split_list("nothing") == []
    assert split_list("a apple 1") == ["apple 1"]
    assert split_list("a apple 1, and a egg 2") == ["apple 1", "egg 2"]
    assert split_list("an alarmclock 1, a cd 2, and a pen 3.") == ["alarmclock 1", "cd 2", "pen 3"]


def test_parse_action_verbs():
    assert parse_action("take apple 1 from countertop 1") == {"verb": "take", "obj": "apple 1", "recep": "countertop 1"}
    assert parse_action("move apple 1 to fridge 1") == {"verb": "put", "obj": "apple 1", "recep": "fridge 1"}
    assert parse_action("go to stoveburner 3")["recep"] == "stoveburner 3"
    assert parse_action("use desklamp 1") == {"verb": "use", "obj": "desklamp 1"}
    assert parse_action(None) == {"verb": None}


@pytest.mark.parametrize("task, task_type, obj, recep", [
    ("put a apple in fridge", "pick_and_place_simple", "apple", "fridge"),
    ("put some spraybottle on toilet", "pick_and_place_simple", "spraybottle", "toilet"),
    ("look at alarmclock under the desklamp", "look_at_obj_in_light", "alarmclock", None),
    ("examine the book with the desklamp", "look_at_obj_in_light", "book", None),
    ("put a clean mug in coffeemachine", "pick_clean_then_place_in_recep", "mug", "coffeemachine"),
    ("clean some cloth and put it in cabinet", "pick_clean_then_place_in_recep", "cloth", "cabinet"),
    ("put a hot potato in diningtable", "pick_heat_then_place_in_recep", "potato", "diningtable"),
    ("heat some egg and put it in garbagecan", "pick_heat_then_place_in_recep", "egg", "garbagecan"),
    ("put a cool tomato in microwave", "pick_cool_then_place_in_recep", "tomato", "microwave"),
    ("cool some bread and put it in countertop", "pick_cool_then_place_in_recep", "bread", "countertop"),
    ("put two cellphone in bed", "pick_two_obj_and_place", "cellphone", "bed"),
    ("find two pillow and put them in sofa", "pick_two_obj_and_place", "pillow", "sofa"),
])
def test_task_types_from_templates(dom, task, task_type, obj, recep):
    assert dom.task_type(task) == task_type
    assert dom.task_type(f"Your task is to: {task}.") == task_type
    goal = parse_task(task)
    assert goal["object"] == obj
    assert goal["receptacle"] == recep


def test_task_type_free_text_and_unknown(dom):
    assert dom.task_type("Rinse the mug and set it on the coffee maker.") == "pick_clean_then_place_in_recep"
    assert dom.task_type("Turn on the lamp while holding the watch.") == "look_at_obj_in_light"
    assert dom.task_type("dance") is None
    assert parse_task("look at alarmclock under the desklamp")["toggle"] == "desklamp"


def test_parse_observation_open_container():
    evs = parse_observation("You open the fridge 1. The fridge 1 is open. In it, you see a egg 1, and a lettuce 2.",
                            "open fridge 1")
    assert evs[0] == {"kind": "open", "recep": "fridge 1"}
    assert evs[1] == {"kind": "contents", "recep": "fridge 1", "rel": "in", "objects": ["egg 1", "lettuce 2"],
                      "open": True}


# ---------------------------------------------------------------- belief level

def test_protocol_and_registration(dom):
    assert isinstance(dom, Domain)
    assert DOMAINS["alfworld"] is AlfworldDomain


def test_initial_belief_reads_room_and_task(dom):
    b = dom.initial_belief("put a cool apple in countertop.", INTRO)
    assert b["task_type"] == "pick_cool_then_place_in_recep"
    assert b["location"] is None and b["holding"] == []
    receps = {n for n, e in b["entities"].items() if e["kind"] == "receptacle"}
    assert receps == {"cabinet 1", "cabinet 2", "countertop 1", "drawer 1", "fridge 1", "microwave 1",
                      "sinkbasin 1", "stoveburner 3", "toaster 1"}
    assert not any(e["attrs"].get("visited") for e in b["entities"].values())
    json.dumps(b)


def test_cool_episode_beliefs(dom):
    b0 = dom.initial_belief("put a cool apple in countertop.", INTRO)
    steps = [
        ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
        ("open fridge 1", "You open the fridge 1. The fridge 1 is open. In it, you see a apple 1, and a egg 2."),
        ("take apple 1 from fridge 1", "You pick up the apple 1 from the fridge 1."),
        ("close fridge 1", "You close the fridge 1."),
        ("cool apple 1 with fridge 1", "You cool the apple 1 using the fridge 1."),
        ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a knife 1."),
    ]
    snapshot = copy.deepcopy(b0)
    b = play(dom, steps, b0)
    assert b0 == snapshot, "perceive must not mutate its input"
    assert b["location"] == "countertop 1"
    assert b["holding"] == ["apple 1"]
    assert b["entities"]["apple 1"] == {"kind": "object", "at": None, "rel": "held", "attrs": {"cooled": True}}
    assert b["entities"]["egg 2"]["at"] == "fridge 1" and b["entities"]["egg 2"]["rel"] == "in"
    assert b["entities"]["fridge 1"]["attrs"] == {"visited": True, "open": False}
    assert b["entities"]["knife 1"]["rel"] == "on"
    assert dom.track(b, "apple") == "apple 1 (held) [cooled]"
    b = dom.perceive(b, "You move the apple 1 to the countertop 1.", "move apple 1 to countertop 1")
    assert b["holding"] == []
    assert dom.track(b, "apple 1") == "apple 1 @ countertop 1 (on) [cooled]"
    assert dom.track(b, "countertop 1") == "countertop 1: visited, you are here; contains apple 1, knife 1"
    assert dom.track(b, "fridge 1") == "fridge 1: closed, visited; contains egg 2"
    assert dom.track(b, "location") == "you are at countertop 1"
    assert dom.track(b, "holding") == "holding nothing"
    assert dom.track(b, "kettle") == "no belief about kettle"
    assert dom.track(b, "[cabinet 2]") == "cabinet 2: not visited; contents unknown"


def test_nothing_happens_changes_nothing(dom):
    b0 = dom.initial_belief("put a cool apple in countertop.", INTRO)
    b1 = dom.perceive(b0, "Nothing happens.", "go to fridge 1")
    assert b1 == b0 and b1 is not b0
    assert dom.progress_events(b0, "Nothing happens.", "take apple 1 from fridge 1") == []


def test_inventory_examine_toggle_slice_heat_clean(dom):
    b = dom.initial_belief("look at alarmclock under the desklamp")
    b = play(dom, [
        ("go to desk 1", "You arrive at desk 1. On the desk 1, you see a alarmclock 1, a desklamp 1, and a pen 2."),
        ("take alarmclock 1 from desk 1", "You pick up the alarmclock 1 from the desk 1."),
        ("use desklamp 1", "You turn on the desklamp 1."),
        ("inventory", "You are carrying: a alarmclock 1."),
        ("examine desklamp 1", "This desklamp 1 is on."),
    ], b)
    assert b["entities"]["desklamp 1"]["attrs"]["toggled"] is True
    assert b["entities"]["desklamp 1"]["at"] == "desk 1"
    assert b["holding"] == ["alarmclock 1"]
    assert b["task_type"] == "look_at_obj_in_light"
    b = dom.perceive(b, "You are not carrying anything.", "inventory")
    assert b["holding"] == []
    b = play(dom, [
        ("slice bread 1 with knife 1", "You sliced the bread 1 with the knife 1."),
        ("heat potato 1 with microwave 1", "You heat the potato 1 using the microwave 1."),
        ("clean mug 1 with sinkbasin 1", "You clean the mug 1 using the sinkbasin 1."),
        ("examine tomato 1", "This is a hot and clean sliced tomato 1."),
    ], b)
    assert b["entities"]["bread 1"]["attrs"] == {"sliced": True}
    assert b["entities"]["potato 1"]["attrs"] == {"heated": True}
    assert b["entities"]["mug 1"]["attrs"] == {"cleaned": True}
    assert b["entities"]["tomato 1"]["attrs"] == {"heated": True, "cleaned": True, "sliced": True}


def test_listed_contents_replace_stale_ones(dom):
    b = play(dom, [
        ("go to sinkbasin 1", "You arrive at sinkbasin 1. On the sinkbasin 1, you see a mug 1."),
        ("go to sinkbasin 1", "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing."),
    ], dom.initial_belief("put a clean mug in coffeemachine"))
    assert b["entities"]["mug 1"]["at"] is None
    assert dom.track(b, "sinkbasin 1") == "sinkbasin 1: visited, you are here; empty"
    assert dom.track(b, "mug") == "mug 1 (seen, location unknown)"


def test_put_defaults_in_vs_on(dom):
    b = dom.initial_belief("put two cellphone in drawer", INTRO)
    b = play(dom, [
        ("take cellphone 1 from bed 1", "You pick up the cellphone 1 from the bed 1."),
        ("move cellphone 1 to drawer 1", "You move the cellphone 1 to the drawer 1."),
        ("take cellphone 2 from bed 1", "You pick up the cellphone 2 from the bed 1."),
        ("move cellphone 2 to bed 1", "You move the cellphone 2 to the bed 1."),
    ], b)
    assert b["entities"]["cellphone 1"]["rel"] == "in"
    assert b["entities"]["cellphone 2"]["rel"] == "on"


def test_progress_events(dom):
    b = dom.initial_belief("heat some egg and put it in garbagecan")
    ev = dom.progress_events
    assert ev(b, "You arrive at fridge 1. The fridge 1 is open. In it, you see a egg 2.", "go to fridge 1") == \
        ["go to fridge", "find egg"]
    assert ev(b, "You pick up the egg 2 from the fridge 1.", "take egg 2 from fridge 1") == ["take egg"]
    assert ev(b, "You heat the egg 2 using the microwave 1.", "heat egg 2 with microwave 1") == ["heat egg"]
    assert ev(b, "You move the egg 2 to the garbagecan 1.", "move egg 2 to garbagecan 1") == \
        ["put egg on garbagecan"]
    assert ev(b, "You move the egg 2 to the fridge 1.", "move egg 2 to fridge 1") == ["put egg in fridge"]
    assert ev(b, "You turn on the desklamp 1.", "use desklamp 1") == ["turn on desklamp"]
    assert ev(b, "You open the drawer 1. The drawer 1 is open. In it, you see nothing.", "open drawer 1") == \
        ["open drawer"]


# ---------------------------------------------------------------- real transcripts

def _fixtures():
    return sorted(FIXTURES.glob("*.json"))


def _load(path):
    return json.loads(path.read_text())


def _replay(dom, data):
    b = dom.initial_belief(data["task"], data["steps"][0]["observation"])
    for step in data["steps"][1:]:
        before = copy.deepcopy(b)
        nb = dom.perceive(b, step["observation"], step["action"])
        assert b == before, "perceive mutated its input"
        json.dumps(nb)
        b = nb
    return b


def test_fixture_transcripts_exist():
    assert len(_fixtures()) >= 6, "record real transcripts into tests/fixtures/perception/"


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.stem)
def test_real_transcript_expectations(dom, path):
    """Each fixture carries the Belief facts the engine's ground truth held at the end of the transcript."""
    data = _load(path)
    b = _replay(dom, data)
    exp = data["expect"]
    assert b["task_type"] == exp["task_type"]
    assert b["location"] == exp["location"]
    assert sorted(b["holding"]) == sorted(exp["holding"])
    for name, (at, rel) in exp["placed"].items():
        ent = b["entities"].get(name)
        assert ent is not None, name
        assert (ent["at"], ent["rel"]) == (at, rel), name
    for name, attrs in exp["attrs"].items():
        for k, v in attrs.items():
            assert b["entities"][name]["attrs"].get(k) == v, (name, k)
    for query, answer in exp.get("track", {}).items():
        assert dom.track(b, query) == answer
