"""Pure operations on harness state. Each returns a new state; inputs are never mutated.

A new state shares the unchanged parts of its input (a changed part is replaced by a new object, never
changed in place): treat states as immutable values, and copy one before changing it in place."""

from __future__ import annotations

import copy

from service.domains.base import Domain
from service.harness.experience import format_entries, top_k_entries
from service.harness.state import DEFAULT_NOTES_CAP, FINISHED_STATUSES, VERB_MODULE, VERBS


class HarnessError(ValueError):
    """A harness operation that the state does not allow (maps to a 4xx in the API)."""


def effective_controls(state: dict, bank_controls: dict | None = None) -> dict:
    """Session controls merged with the bank's: disabled verbs are united, the tighter cap wins."""
    sc = state["controls"]
    bc = bank_controls or {}
    disabled = sorted(set(sc.get("disabled_verbs", [])) | set(bc.get("disabled_verbs", []) or []))
    caps = [c for c in (sc.get("harness_cap"), bc.get("harness_cap")) if c is not None]
    return {"disabled_verbs": disabled, "harness_cap": min(caps) if caps else None}


def remaining_budget(state: dict) -> int | None:
    b = state["budget"]
    return None if b["max_steps"] is None else b["max_steps"] - b["used"]


def allowed_verbs(state: dict, bank_controls: dict | None = None) -> list[str]:
    """Harness verbs the policy may call right now.

    Only `inline` mode has verbs. A verb needs its module switched on, must not be
    disabled by an operator, the per-step cap must not be reached, and - because a
    harness call spends a step of the same budget as an environment action - at
    least two steps must remain so that an environment action still fits.
    """
    if state["mode"] != "inline" or state["status"] != "active":
        return []
    ctl = effective_controls(state, bank_controls)
    cap = ctl["harness_cap"]
    if cap is not None and state["step_harness_calls"] >= cap:
        return []
    rem = remaining_budget(state)
    if rem is not None and rem < 2:
        return []
    return [v for v in VERBS if state["modules"][VERB_MODULE[v]] and v not in ctl["disabled_verbs"]]


def _apply_pins(belief: dict, pins: dict) -> dict:
    if not pins:
        return belief
    ents = dict(belief.get("entities", {}))
    for name, fact in pins.items():
        ents[name] = copy.deepcopy(fact)
    return {**belief, "entities": ents}


def observe(
    state: dict,
    domain: Domain,
    observation: str,
    admissible: list[str] | None,
    won: bool | None = None,
    done: bool | None = None,
) -> dict:
    """Take in the environment's observation: perception updates Belief (never the policy)."""
    s = dict(state)  # structural sharing: parts that change are replaced, never mutated
    action = s["last_action"]
    if s["observation"] is None and action is None:
        belief = domain.perceive(s["belief"], observation, None)
    else:
        belief = domain.perceive(s["belief"], observation, action)
    s["belief"] = _apply_pins(belief, s["controls"].get("pinned_beliefs", {}))
    first = s.get("first_seen", {})
    added = {name: e["at"] for name, e in s["belief"].get("entities", {}).items()
             if e.get("kind") == "object" and e.get("at") and name not in first}
    s["first_seen"] = {**first, **added} if added else first
    if action is not None:
        s["history"] = (s["history"] + [{"action": action, "observation": observation}])[-s["history_window"]:]
        done_texts = domain.progress_events(s["belief"], observation, action)
        if done_texts:
            s["progress"] = _mark_progress(s["progress"], done_texts)
    s["observation"] = observation
    s["observation_shown"] = False
    s["admissible"] = list(admissible) if admissible is not None else None
    s["step_harness_calls"] = 0
    if won is not None:
        s["won"] = bool(won)
    if done:
        s["done"] = True
    return s


def _mark_progress(progress: dict, done_texts: list[str]) -> dict:
    subgoals = []
    lowered = [t.lower() for t in done_texts]
    for g in progress["subgoals"]:
        g = dict(g)
        if g["status"] in ("open", "partial") and any(t in g["text"].lower() for t in lowered):
            g["status"] = "complete"
        subgoals.append(g)
    return {**progress, "subgoals": subgoals}


def _commit(progress: dict, text: str) -> dict:
    subgoals = []
    for g in progress["subgoals"]:
        g = dict(g)
        if g["status"] in ("open", "partial"):
            g["status"] = "complete"
        subgoals.append(g)
    subgoals.append({"text": text, "status": "open"})
    cap = progress["cap"]
    while len(subgoals) > cap:
        idx = next((i for i, g in enumerate(subgoals) if g["status"] in FINISHED_STATUSES), 0)
        subgoals.pop(idx)
    return {**progress, "subgoals": subgoals}


def apply_verb(
    state: dict,
    domain: Domain,
    verb: str,
    arg: str,
    bank_entries: dict | None = None,
    *,
    recall_k: int = 3,
) -> tuple[dict, str]:
    """Run one harness verb; returns (new state, result text shown in the next prompt)."""
    if verb not in VERBS:
        raise HarnessError(f"unknown verb {verb!r}")
    arg = arg.strip()
    s = dict(state)  # structural sharing: parts that change are replaced, never mutated
    if verb == "track":
        result = domain.track(s["belief"], arg)
    elif verb == "commit":
        if not arg:
            raise HarnessError("commit needs a subgoal")
        s["progress"] = _commit(s["progress"], arg)
        result = f"committed: {arg}"
    elif verb == "recall":
        hits = top_k_entries(bank_entries or {}, arg or s["task"], recall_k)
        recalled = list(s["recalled"])
        for e in hits:
            if e["id"] not in recalled:
                recalled.append(e["id"])
        s["recalled"] = recalled
        result = format_entries(hits) if hits else f"no experience about {arg}"
    else:  # note
        if not arg:
            raise HarnessError("note needs an insight")
        if len(s["notes"]) < DEFAULT_NOTES_CAP and arg not in s["notes"]:
            s["notes"] = s["notes"] + [arg]
            result = "noted (consolidated into Experience after the episode)"
        else:
            result = "note not kept (duplicate or note cap reached)"
    b = s["budget"]
    s["budget"] = {**b, "used": b["used"] + 1, "harness_calls": b["harness_calls"] + 1}
    s["step_harness_calls"] += 1
    s["last_result"] = {"verb": verb, "arg": arg, "result": result}
    return s, result


def apply_env_action(state: dict, action: str) -> dict:
    """Record the environment action the service returns; its observation arrives next step."""
    s = dict(state)  # structural sharing: parts that change are replaced, never mutated
    s["last_action"] = action
    b = s["budget"]
    s["budget"] = {**b, "used": b["used"] + 1, "env_steps": b["env_steps"] + 1}
    return s
