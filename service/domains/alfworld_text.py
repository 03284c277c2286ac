"""Rule-based parsing of ALFWorld text (observations, actions, task lines).

Pure functions, no state. `parse_observation` turns one observation (plus the
action that produced it) into a list of small JSON-serialisable *events*; the
belief update in `alfworld.py` applies them.

Event kinds (all dicts with a "kind" key):

    room      {"receptacles": [...]}                  "You are in the middle of a room. ... you see a cabinet 1, ..."
    task      {"text": "put a clean apple in fridge"} "Your task is to: ..."
    arrive    {"recep": "fridge 1"}                   "You arrive at fridge 1."
    contents  {"recep", "rel": "in"|"on", "objects": [...], "open": True|None}
                                                      "On the X, you see ..." / "The X is open. In it, you see ..."
    closed    {"recep"}                               "The X is closed."
    open      {"recep"}  / close {"recep"}            "You open the X." / "You close the X."
    pickup    {"obj", "recep"}                        "You pick up the A from the X."
    put       {"obj", "recep"}                        "You move the A to the X." (and the put variants)
    cool / heat / clean {"obj", "tool"}               "You cool the A using the fridge 1."
    slice     {"obj", "tool"}                         "You sliced the A with the knife 1."
    toggle    {"obj", "on": bool}                     "You turn on the desklamp 1."
    inventory {"objects": [...]}                      "You are carrying: ..." / "You are not carrying anything."
    examine   {"obj", "attrs": {...}, "contents": [...]|None}
                                                      "This is a hot apple 1." / "This desklamp 1 is on." ...
    facing    {"receps": [...], "floor": [...]}       "You are facing the X. Next to it, you see ..."
    failed    {}                                      "Nothing happens." (or an unknown reply to an env action)
"""

from __future__ import annotations

import re

# receptacle types that the engine renders as openable ("is open"/"is closed", "In it, you see")
OPENABLE_TYPES = frozenset({"fridge", "cabinet", "microwave", "drawer", "safe", "box"})

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

_NAME = r"[a-z][a-z\-]*(?: [a-z][a-z\-]*)*(?: \d+)?"
_ARTICLE = re.compile(r"^(?:a|an|the|some)\s+", re.I)
# compiled once (re.sub/re.split with a pattern string look the pattern up in re's cache on every call)
_WS = re.compile(r"\s+")
_TRAILING_NUMBER = re.compile(r"\s*\d+$")
_LIST_SEP = re.compile(r",\s*(?:and\s+)?|\s+and\s+(?=(?:a|an|the)\s)")
_SENTENCE_SEP = re.compile(r"(?<=\.)\s+|\n+")
_TASK_IN = re.compile(r"your task is to:\s*(.+)", re.I | re.S)
_TASK_LINE = re.compile(r"your task is to:\s*(.+)$", re.I | re.S)
_LOC = re.compile(r"loc \d+")


def norm_name(text: str) -> str:
    """'an Apple 1.' -> 'apple 1' (lower case, no article, single spaces, no end punctuation)."""
    text = _WS.sub(" ", text.strip().lower()).strip(" .,;:!?\"'[]()")
    return _ARTICLE.sub("", text).strip()


def entity_type(name: str) -> str:
    """'apple 1' -> 'apple'; 'sinkbasin 2' -> 'sinkbasin'."""
    return _TRAILING_NUMBER.sub("", norm_name(name))


def split_list(text: str) -> list[str]:
    """'a cabinet 1, a cabinet 2, and a drawer 1' -> ['cabinet 1', 'cabinet 2', 'drawer 1']; 'nothing' -> []."""
    text = text.strip().rstrip(".").strip()
    if not text or text.lower() == "nothing":
        return []
    parts = _LIST_SEP.split(text)
    out = []
    for part in parts:
        name = norm_name(part)
        if name and name != "nothing":
            out.append(name)
    return out


def _sentences(text: str) -> list[str]:
    # ALFWorld names never contain '.', so a period followed by space/newline/end ends a sentence.
    return [s.strip() for s in _SENTENCE_SEP.split(text) if s.strip()]


# ---------------------------------------------------------------- actions

_ACTION_PATTERNS = (
    ("goto", re.compile(rf"^go to (?P<recep>{_NAME})$")),
    ("open", re.compile(rf"^open (?P<recep>{_NAME})$")),
    ("close", re.compile(rf"^close (?P<recep>{_NAME})$")),
    ("take", re.compile(rf"^(?:take|pick up) (?P<obj>{_NAME}) from (?P<recep>{_NAME})$")),
    ("put", re.compile(rf"^(?:move|put) (?P<obj>{_NAME}) (?:to|in|on|into|in/on) (?P<recep>{_NAME})$")),
    ("cool", re.compile(rf"^cool (?P<obj>{_NAME}) with (?P<recep>{_NAME})$")),
    ("heat", re.compile(rf"^heat (?P<obj>{_NAME}) with (?P<recep>{_NAME})$")),
    ("clean", re.compile(rf"^clean (?P<obj>{_NAME}) with (?P<recep>{_NAME})$")),
    ("slice", re.compile(rf"^slice (?P<obj>{_NAME}) with (?P<recep>{_NAME})$")),
    ("use", re.compile(rf"^(?:use|toggle) (?P<obj>{_NAME})$")),
    ("examine", re.compile(rf"^(?:examine|x) (?P<obj>{_NAME})$")),
    ("inventory", re.compile(r"^(?:inventory|inv|i)$")),
    ("look", re.compile(r"^(?:look|l)$")),
    ("help", re.compile(r"^help$")),
)


def parse_action(action: str | None) -> dict:
    """'take apple 1 from countertop 1' -> {'verb': 'take', 'obj': 'apple 1', 'recep': 'countertop 1'}."""
    if not action:
        return {"verb": None}
    text = _WS.sub(" ", action.strip().lower())
    for verb, pattern in _ACTION_PATTERNS:
        m = pattern.match(text)
        if m:
            return {"verb": verb, **{k: v.strip() for k, v in m.groupdict().items()}}
    return {"verb": "other", "text": text}


# ---------------------------------------------------------------- task text

_TASK_RULES = (
    # (task_type, regex over the normalised task sentence); first match wins
    ("look_at_obj_in_light", re.compile(
        r"^(?:look at|examine)\s+(?:the\s+|a\s+|an\s+|some\s+)?(?P<sliced>sliced\s+)?(?P<obj>.+?)\s+"
        r"(?:under|with|in|using)\s+(?:the\s+|a\s+)?(?P<toggle>[a-z ]+?)$")),
    ("pick_two_obj_and_place", re.compile(
        r"^(?:put|find|place)\s+two\s+(?P<sliced>sliced\s+)?(?P<obj>.+?)\s+(?:and put them\s+)?"
        r"(?:in|on|into|onto|in/on)\s+(?:the\s+|a\s+)?(?P<recep>[a-z ]+?)$")),
    ("pick_clean_then_place_in_recep", re.compile(
        r"^(?:put a clean\s+(?P<s1>slice of\s+)?(?P<obj>.+?)|clean some\s+(?P<s2>sliced\s+)?(?P<obj2>.+?)\s+and put it)"
        r"\s+(?:in|on|into|onto|in/on)\s+(?:the\s+|a\s+)?(?P<recep>[a-z ]+?)$")),
    ("pick_heat_then_place_in_recep", re.compile(
        r"^(?:put a hot\s+(?P<s1>slice of\s+)?(?P<obj>.+?)|heat some\s+(?P<s2>sliced\s+)?(?P<obj2>.+?)\s+and put it)"
        r"\s+(?:in|on|into|onto|in/on)\s+(?:the\s+|a\s+)?(?P<recep>[a-z ]+?)$")),
    ("pick_cool_then_place_in_recep", re.compile(
        r"^(?:put a (?:cool|cold)\s+(?P<s1>slice of\s+)?(?P<obj>.+?)|cool some\s+(?P<s2>sliced\s+)?(?P<obj2>.+?)"
        r"\s+and put it)\s+(?:in|on|into|onto|in/on)\s+(?:the\s+|a\s+)?(?P<recep>[a-z ]+?)$")),
    ("pick_and_place_simple", re.compile(
        r"^(?:put|place)\s+(?:a\s+|an\s+|some\s+|the\s+)?(?P<sliced>sliced\s+)?(?P<obj>.+?)\s+"
        r"(?:in|on|into|onto|in/on)\s+(?:the\s+|a\s+)?(?P<recep>[a-z ]+?)$")),
)

# loose keyword fallback for free-form (human-written) task text
_TASK_KEYWORDS = (
    ("look_at_obj_in_light", re.compile(r"\b(lamp|light)\b")),
    ("pick_two_obj_and_place", re.compile(r"\btwo\b|\b2\b")),
    ("pick_clean_then_place_in_recep", re.compile(r"\b(clean|rinse|wash)")),
    ("pick_heat_then_place_in_recep", re.compile(r"\b(hot|heat|warm|microwave)")),
    ("pick_cool_then_place_in_recep", re.compile(r"\b(cool|cold|chill|refrigerat)")),
    ("pick_and_place_simple", re.compile(r"\b(put|place|move|set)\b")),
)


def task_sentence(text: str) -> str:
    """The goal sentence: text after 'Your task is to:' if present, normalised (lower case, no final period)."""
    m = _TASK_IN.search(text)
    if m:
        text = m.group(1)
    text = text.strip().split("\n")[0]
    return _WS.sub(" ", text).strip().rstrip(".").strip().lower()


def parse_task(text: str | None) -> dict:
    """Task type and goal slots: {'task_type', 'object', 'receptacle', 'toggle', 'sliced'} (None when unknown)."""
    goal = {"task_type": None, "object": None, "receptacle": None, "toggle": None, "sliced": False}
    if not text:
        return goal
    sent = task_sentence(text)
    for task_type, pattern in _TASK_RULES:
        m = pattern.match(sent)
        if not m:
            continue
        g = m.groupdict()
        goal["task_type"] = task_type
        goal["object"] = norm_name(g.get("obj") or g.get("obj2") or "") or None
        goal["receptacle"] = norm_name(g["recep"]) if g.get("recep") else None
        goal["toggle"] = norm_name(g["toggle"]) if g.get("toggle") else None
        goal["sliced"] = bool(g.get("sliced") or g.get("s1") or g.get("s2"))
        return goal
    for task_type, pattern in _TASK_KEYWORDS:
        if pattern.search(sent):
            goal["task_type"] = task_type
            return goal
    return goal


# ---------------------------------------------------------------- observations

_RE = {
    "room": re.compile(r"^looking quickly around you, you see (?P<list>.*?)\.?$"),
    "middle": re.compile(r"^you are in the middle of a room\.$"),
    "task": re.compile(r"^your task is to:\s*(?P<text>.*?)\.?$"),
    "arrive": re.compile(rf"^you arrive at (?P<recep>{_NAME})\.$"),
    "on": re.compile(rf"^on the (?P<recep>{_NAME}), you see (?P<list>.*?)\.?$"),
    "open_in": re.compile(rf"^the (?P<recep>{_NAME}) is open\. in it, you see (?P<list>.*?)\.?$"),
    "in": re.compile(r"^in it, you see (?P<list>.*?)\.?$"),
    "is_open": re.compile(rf"^the (?P<recep>{_NAME}) is open\.$"),
    "closed": re.compile(rf"^the (?P<recep>{_NAME}) is closed\.$"),
    "open": re.compile(rf"^you open the (?P<recep>{_NAME})\.$"),
    "close": re.compile(rf"^you close the (?P<recep>{_NAME})\.$"),
    "pickup": re.compile(rf"^(?:\w+: )?you pick up the (?P<obj>{_NAME})(?: from the (?P<recep>{_NAME}))?\.$"),
    "put": re.compile(rf"^(?:\w+: )?you (?:move|put) the (?P<obj>{_NAME}) (?:to|in|on|into) the (?P<recep>{_NAME})\.$"),
    "treat": re.compile(rf"^you (?P<verb>cool|heat|clean) the (?P<obj>{_NAME}) using the (?P<tool>{_NAME})\.$"),
    "slice": re.compile(rf"^you slice(?:d)? the (?P<obj>{_NAME}) with the (?P<tool>{_NAME})\.$"),
    "toggle": re.compile(rf"^you turn (?P<state>on|off) the (?P<obj>{_NAME})\.$"),
    "carry": re.compile(r"^you are carrying:?\s*(?P<list>.*?)\.?$"),
    "carry_none": re.compile(r"^you are not carrying anything\.?$"),
    "facing": re.compile(r"^you are facing the (?P<list>.*?)\.$"),
    "next_to": re.compile(r"^next to it, you see (?P<list>.*?)\.?$"),
    "ex_container": re.compile(rf"^this is a normal (?P<obj>{_NAME})\. in it, you see (?P<list>.*?)\.?$"),
    "ex_state": re.compile(rf"^this (?P<obj>{_NAME}) is (?P<state>on|off)\.$"),
    "ex_plain": re.compile(rf"^there's nothing special about (?P<obj>{_NAME})\.?$"),
    "ex_attrs": re.compile(rf"^this is an? (?P<adj>(?:(?:hot|cold|cool|clean|sliced|and) )+)(?P<obj>{_NAME})\.$"),
    "nothing": re.compile(r"^nothing happens\.?$"),
    "welcome": re.compile(r"^-= welcome to textworld.*=-$"),
}

_ADJ_ATTR = {"hot": "heated", "cold": "cooled", "cool": "cooled", "clean": "cleaned", "sliced": "sliced"}


def _merge_sentences(sents: list[str]) -> list[str]:
    """Re-join the two-sentence forms that belong together ('The X is open.' + 'In it, you see ...')."""
    out: list[str] = []
    for s in sents:
        low = s.lower()
        if out and (low.startswith("in it, you see") and _RE["is_open"].match(out[-1].lower())
                    or low.startswith("in it, you see") and out[-1].lower().startswith("this is a normal")):
            out[-1] = out[-1] + " " + s
        else:
            out.append(s)
    return out


def parse_observation(observation: str, action: str | None = None) -> list[dict]:
    """Events found in `observation`; `action` (the command that produced it) resolves ambiguity."""
    act = parse_action(action)
    events: list[dict] = []
    if observation is None:
        return events
    text = observation.replace("\r", "")
    # the task line may span to the end of the text; pull it out first
    m = _TASK_LINE.search(text)
    if m:
        events.append({"kind": "task", "text": task_sentence(m.group(0))})
        text = text[: m.start()]
    for sent in _merge_sentences(_sentences(text)):
        low = sent.lower().strip()
        ev = _parse_sentence(low, act)
        if ev is not None:
            events.append(ev)
    if not events and act["verb"] not in (None, "look", "help", "inventory", "examine", "other"):
        # an environment action whose reply we do not understand changed nothing we can see
        events.append({"kind": "failed"})
    return events


def _parse_sentence(low: str, act: dict) -> dict | None:
    r = _RE
    if r["welcome"].match(low) or r["middle"].match(low):
        return None
    if m := r["room"].match(low):
        return {"kind": "room", "receptacles": split_list(m["list"])}
    if m := r["arrive"].match(low):
        recep = m["recep"]
        if _LOC.fullmatch(recep) and act.get("recep"):
            recep = act["recep"]  # older engines say "You arrive at loc 12."
        return {"kind": "arrive", "recep": recep}
    if m := r["open_in"].match(low):
        return {"kind": "contents", "recep": m["recep"], "rel": "in", "objects": split_list(m["list"]), "open": True}
    if m := r["on"].match(low):
        return {"kind": "contents", "recep": m["recep"], "rel": "on", "objects": split_list(m["list"]), "open": None}
    if m := r["is_open"].match(low):
        return {"kind": "contents", "recep": m["recep"], "rel": "in", "objects": None, "open": True}
    if m := r["in"].match(low):
        recep = act.get("recep") or act.get("obj")
        if recep:
            return {"kind": "contents", "recep": recep, "rel": "in", "objects": split_list(m["list"]), "open": True}
        return None
    if m := r["closed"].match(low):
        return {"kind": "closed", "recep": m["recep"]}
    if m := r["open"].match(low):
        return {"kind": "open", "recep": m["recep"]}
    if m := r["close"].match(low):
        return {"kind": "close", "recep": m["recep"]}
    if m := r["pickup"].match(low):
        return {"kind": "pickup", "obj": m["obj"], "recep": m["recep"] or act.get("recep")}
    if m := r["put"].match(low):
        return {"kind": "put", "obj": m["obj"], "recep": m["recep"]}
    if m := r["treat"].match(low):
        return {"kind": m["verb"], "obj": m["obj"], "tool": m["tool"]}
    if m := r["slice"].match(low):
        return {"kind": "slice", "obj": m["obj"], "tool": m["tool"]}
    if m := r["toggle"].match(low):
        return {"kind": "toggle", "obj": m["obj"], "on": m["state"] == "on"}
    if r["carry_none"].match(low):
        return {"kind": "inventory", "objects": []}
    if m := r["carry"].match(low):
        return {"kind": "inventory", "objects": split_list(m["list"])}
    if m := r["facing"].match(low):
        return {"kind": "facing", "receps": split_list(m["list"]), "floor": []}
    if m := r["next_to"].match(low):
        return {"kind": "floor", "objects": split_list(m["list"])}
    if m := r["ex_container"].match(low):
        return {"kind": "examine", "obj": m["obj"], "attrs": {}, "contents": split_list(m["list"])}
    if m := r["ex_state"].match(low):
        return {"kind": "examine", "obj": m["obj"], "attrs": {"toggled": m["state"] == "on"}, "contents": None}
    if m := r["ex_plain"].match(low):
        return {"kind": "examine", "obj": m["obj"], "attrs": {}, "contents": None}
    if m := r["ex_attrs"].match(low):
        attrs = {_ADJ_ATTR[w]: True for w in m["adj"].split() if w in _ADJ_ATTR}
        return {"kind": "examine", "obj": m["obj"], "attrs": attrs, "contents": None}
    if r["nothing"].match(low):
        return {"kind": "failed"}
    return None
