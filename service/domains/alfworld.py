"""ALFWorld domain: rule-based perception of ALFWorld text into Belief.

Belief (see `service.domains.base`) plus two ALFWorld keys:

    "task": "put a cool apple in fridge"        # the goal sentence
    "goal": {"object": "apple", "receptacle": "fridge", "toggle": None, "sliced": False}

Entities: objects carry {"kind": "object", "at": <receptacle>|None, "rel": "in"|"on"|"held"|None,
"attrs": {...}}; receptacles carry {"kind": "receptacle", "attrs": {...}} with `open` (only for
openable ones, once known) and `visited`. An object is "in" an openable receptacle (the engine says
"In it, you see") and "on" any other ("On the X, you see").

Every function is pure: inputs are never mutated, results are new JSON-serialisable dicts that share the
parts perception did not change with the input (treat beliefs as immutable values).

Progress events (`progress_events`) are short lower-case subgoal texts naming *types*, not instances:

    take <obj>                      "You pick up the apple 1 from ..."
    put <obj> in|on <recep>         "You move the apple 1 to the fridge 1." (in/on as in Belief)
    cool|heat|clean <obj>           "You cool the apple 1 using the fridge 1."
    slice <obj>                     "You sliced the apple 1 with the knife 1."
    turn on <obj>                   "You turn on the desklamp 1."
    open <recep>                    "You open the fridge 1."
    go to <recep>                   a successful "go to"
    find <obj>                      an object of the goal's object (or toggle) type is in view
"""

from __future__ import annotations

from service.domains.alfworld_text import (
    OPENABLE_TYPES,
    entity_type,
    norm_name,
    parse_action,
    parse_observation,
    parse_task,
)

_TREAT_ATTR = {"cool": "cooled", "heat": "heated", "clean": "cleaned"}
_TRACK_LIMIT = 8


def _empty_belief() -> dict:
    return {
        "location": None,
        "holding": [],
        "entities": {},
        "task_type": None,
        "facts": [],
        "task": None,
        "goal": {"object": None, "receptacle": None, "toggle": None, "sliced": False},
    }


def receptacle_rel(belief: dict, recep: str) -> str:
    """'in' for openable receptacles (text said open/closed, or the type is openable), else 'on'."""
    ent = belief.get("entities", {}).get(recep) or {}
    if "open" in (ent.get("attrs") or {}) or ent.get("contents_rel") == "in":
        return "in"
    if ent.get("contents_rel") == "on":
        return "on"
    return "in" if entity_type(recep) in OPENABLE_TYPES else "on"


class _Updater:
    """Applies perception events to a private copy of a belief.

    Copy on write: the belief and its entity table are copied up front, an entity (with its attrs) only when
    an event changes it, so the result shares the unchanged entities with the input and the input is never
    changed."""

    def __init__(self, belief: dict):
        if belief:
            self.b = dict(belief)
            for key, value in _empty_belief().items():
                if key not in self.b:
                    self.b[key] = value
        else:
            self.b = _empty_belief()
        self.ents = self.b["entities"] = dict(self.b["entities"])
        self._owned: set[str] = set()   # entities copied (or created) by this updater, free to change

    # -- helpers
    def own(self, name: str) -> dict:
        """The entity `name` (which must exist), copied once so that it may be changed."""
        ent = self.ents[name]
        if name not in self._owned:
            ent = dict(ent)
            if isinstance(ent.get("attrs"), dict):
                ent["attrs"] = dict(ent["attrs"])
            self.ents[name] = ent
            self._owned.add(name)
        return ent

    def recep(self, name: str) -> dict:
        ent = self.ents.get(name)
        if ent is None or ent.get("kind") != "receptacle":
            ent = {"kind": "receptacle", "attrs": dict((ent or {}).get("attrs") or {})}
            self.ents[name] = ent
            self._owned.add(name)
            return ent
        return self.own(name)

    def obj(self, name: str) -> dict:
        ent = self.ents.get(name)
        if ent is None or ent.get("kind") != "object":
            ent = {"kind": "object", "at": None, "rel": None, "attrs": dict((ent or {}).get("attrs") or {})}
            self.ents[name] = ent
            self._owned.add(name)
            return ent
        return self.own(name)

    def release(self, name: str) -> None:
        if name in self.b["holding"]:
            self.b["holding"] = [h for h in self.b["holding"] if h != name]

    def place(self, name: str, recep: str, rel: str) -> None:
        ent = self.obj(name)
        ent["at"], ent["rel"] = recep, rel
        self.release(name)

    def hold(self, name: str) -> None:
        ent = self.obj(name)
        ent["at"], ent["rel"] = None, "held"
        if name not in self.b["holding"]:
            self.b["holding"] = self.b["holding"] + [name]

    # -- events
    def apply(self, ev: dict, act: dict) -> None:
        kind = ev["kind"]
        handler = getattr(self, "on_" + kind, None)
        if handler is not None:
            handler(ev, act)

    def on_task(self, ev, act):
        self.b["task"] = ev["text"]
        goal = parse_task(ev["text"])
        self.b["task_type"] = goal.pop("task_type")
        self.b["goal"] = goal

    def on_room(self, ev, act):
        self.b["location"] = None  # "You are in the middle of a room": not at any receptacle
        for r in ev["receptacles"]:
            self.recep(r)

    def on_arrive(self, ev, act):
        self.b["location"] = ev["recep"]
        self.recep(ev["recep"])["attrs"]["visited"] = True

    def on_facing(self, ev, act):
        if ev["receps"]:
            self.b["location"] = ev["receps"][0]
        for r in ev["receps"]:
            self.recep(r)["attrs"]["visited"] = True

    def on_floor(self, ev, act):
        for o in ev["objects"]:
            self.obj(o)

    def on_contents(self, ev, act):
        name = ev["recep"]
        ent = self.recep(name)
        ent["attrs"]["visited"] = True
        if ev["open"] is not None:
            ent["attrs"]["open"] = ev["open"]
        ent["contents_rel"] = ev["rel"]
        if ev["objects"] is None:
            return
        ent["contents_known"] = True
        seen = set(ev["objects"])
        for o in ev["objects"]:
            self.place(o, name, ev["rel"])
        # objects believed here but not listed any more: location unknown
        for other, oent in list(self.ents.items()):
            if oent.get("kind") == "object" and oent.get("at") == name and other not in seen:
                oent = self.own(other)
                oent["at"], oent["rel"] = None, None

    def on_closed(self, ev, act):
        ent = self.recep(ev["recep"])
        ent["attrs"]["open"] = False
        ent["attrs"]["visited"] = True
        ent["contents_rel"] = "in"

    def on_open(self, ev, act):
        ent = self.recep(ev["recep"])
        ent["attrs"]["open"] = True
        ent["contents_rel"] = "in"

    def on_close(self, ev, act):
        ent = self.recep(ev["recep"])
        ent["attrs"]["open"] = False
        ent["contents_rel"] = "in"

    def on_pickup(self, ev, act):
        self.hold(ev["obj"])

    def on_put(self, ev, act):
        recep = ev["recep"]
        if recep not in self.ents:
            self.recep(recep)
        if self.ents[recep].get("kind") == "object":  # put into a receptacle object (bowl, plate...)
            self.place(ev["obj"], recep, "in")
        else:
            self.place(ev["obj"], recep, receptacle_rel(self.b, recep))

    def _treat(self, ev, attr, undo=None):
        attrs = self.obj(ev["obj"])["attrs"]
        attrs[attr] = True
        if undo:
            attrs.pop(undo, None)

    def on_cool(self, ev, act):
        self._treat(ev, "cooled", undo="heated")

    def on_heat(self, ev, act):
        self._treat(ev, "heated", undo="cooled")

    def on_clean(self, ev, act):
        self._treat(ev, "cleaned")

    def on_slice(self, ev, act):
        self._treat(ev, "sliced")

    def on_toggle(self, ev, act):
        self.obj(ev["obj"])["attrs"]["toggled"] = ev["on"]

    def on_inventory(self, ev, act):
        for h in list(self.b["holding"]):
            if h not in ev["objects"]:
                self.release(h)
                ent = self.ents.get(h)
                if ent and ent.get("rel") == "held":
                    self.own(h)["rel"] = None
        for o in ev["objects"]:
            self.hold(o)

    def on_examine(self, ev, act):
        ent = self.obj(ev["obj"])
        for k, v in ev["attrs"].items():
            ent["attrs"][k] = v
        if ev["contents"] is not None:
            for o in ev["contents"]:
                self.place(o, ev["obj"], "in")


class AlfworldDomain:
    name = "alfworld"
    _parsed = None  # ((observation, action), (parsed action, events)): perceive and progress_events share a parse

    def _parse(self, observation: str, action: str | None) -> tuple[dict, list[dict]]:
        """parse_action + parse_observation, remembered for the last (observation, action); read-only results."""
        key = (observation, action)
        if self._parsed is not None and self._parsed[0] == key:
            return self._parsed[1]
        out = (parse_action(action), parse_observation(observation or "", action))
        self._parsed = (key, out)
        return out

    # ------------------------------------------------------------ protocol
    def initial_belief(self, task: str, observation: str | None = None) -> dict:
        belief = _empty_belief()
        if task:
            belief = self.perceive(belief, "Your task is to: " + task.split("Your task is to:")[-1].strip(), None)
        if observation:
            belief = self.perceive(belief, observation, None)
        return belief

    def perceive(self, belief: dict, observation: str, action: str | None) -> dict:
        act, events = self._parse(observation, action)
        up = _Updater(belief)
        if any(ev["kind"] == "failed" for ev in events):
            return up.b
        for ev in events:
            up.apply(ev, act)
        # a successful "go to X" puts the agent at X even if the reply is unusual
        if act["verb"] == "goto" and events and not any(e["kind"] == "arrive" for e in events):
            up.on_arrive({"recep": act["recep"]}, act)
        return up.b

    def task_type(self, task: str) -> str | None:
        return parse_task(task)["task_type"]

    def progress_events(self, belief: dict, observation: str, action: str | None) -> list[str]:
        act, events = self._parse(observation, action)
        if any(ev["kind"] == "failed" for ev in events):
            return []
        goal = (belief or {}).get("goal") or {}
        wanted = {t for t in (goal.get("object"), goal.get("toggle")) if t}
        out: list[str] = []

        def add(text: str) -> None:
            if text not in out:
                out.append(text)

        for ev in events:
            kind = ev["kind"]
            if kind == "pickup":
                add(f"take {entity_type(ev['obj'])}")
            elif kind == "put":
                rel = receptacle_rel(belief or {}, ev["recep"])
                add(f"put {entity_type(ev['obj'])} {rel} {entity_type(ev['recep'])}")
            elif kind in _TREAT_ATTR or kind == "slice":
                add(f"{kind} {entity_type(ev['obj'])}")
            elif kind == "toggle" and ev["on"]:
                add(f"turn on {entity_type(ev['obj'])}")
            elif kind == "open":
                add(f"open {entity_type(ev['recep'])}")
            elif kind == "arrive" and act["verb"] == "goto":
                add(f"go to {entity_type(ev['recep'])}")
            if kind in ("contents", "floor", "inventory") and ev.get("objects"):
                for o in ev["objects"]:
                    if entity_type(o) in wanted:
                        add(f"find {entity_type(o)}")
        return out

    # ------------------------------------------------------------ track
    def track(self, belief: dict, query: str) -> str:
        belief = belief or _empty_belief()
        q = norm_name(query or "")
        ents = belief.get("entities", {})
        if q in ("location", "where", "here", "me", "agent"):
            loc = belief.get("location")
            return f"you are at {loc}" if loc else "you are in the middle of the room (no location yet)"
        if q in ("holding", "inventory", "hands", "held", "hand"):
            held = belief.get("holding") or []
            return "holding " + ", ".join(held) if held else "holding nothing"
        if q in ("task", "goal", "task type", "task_type"):
            return f"task: {belief.get('task') or '?'} ({belief.get('task_type') or 'unknown type'})"
        if q in ents:
            return self._describe(belief, q)
        matches = [n for n in ents if entity_type(n) == q]
        if not matches and q.endswith("s"):
            matches = [n for n in ents if entity_type(n) == q[:-1]]
        if not matches:
            compact = q.replace(" ", "")
            matches = [n for n in ents if entity_type(n) == compact]
        if not matches:
            return f"no belief about {q or (query or '').strip() or 'that'}"
        matches.sort(key=_natural)
        lines = [self._describe(belief, n) for n in matches[:_TRACK_LIMIT]]
        if len(matches) > _TRACK_LIMIT:
            lines.append(f"(+{len(matches) - _TRACK_LIMIT} more)")
        return "; ".join(lines)

    def _describe(self, belief: dict, name: str) -> str:
        ent = belief["entities"][name]
        attrs = ent.get("attrs") or {}
        flags = [k for k in ("cooled", "heated", "cleaned", "sliced", "toggled") if attrs.get(k)]
        suffix = f" [{', '.join(flags)}]" if flags else ""
        if ent.get("kind") == "object":
            if ent.get("rel") == "held" or name in (belief.get("holding") or []):
                return f"{name} (held){suffix}"
            if ent.get("at"):
                return f"{name} @ {ent['at']} ({ent.get('rel') or 'on'}){suffix}"
            return f"{name} (seen, location unknown){suffix}"
        state = []
        if "open" in attrs:
            state.append("open" if attrs["open"] else "closed")
        state.append("visited" if attrs.get("visited") else "not visited")
        if belief.get("location") == name:
            state.append("you are here")
        inside = sorted((n for n, e in belief["entities"].items()
                         if e.get("kind") == "object" and e.get("at") == name), key=_natural)
        if inside:
            contents = "contains " + ", ".join(inside)
        elif ent.get("contents_known"):
            contents = "empty"
        else:
            contents = "contents unknown"
        return f"{name}: {', '.join(state)}; {contents}"


def _natural(name: str):
    t = entity_type(name)
    num = name[len(t):].strip()
    return (t, int(num) if num.isdigit() else 0)
