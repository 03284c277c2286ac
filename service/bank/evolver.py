"""The default evolver: deterministic rules that consolidate episode evidence into the bank.

Input: the bank state and the pending evidence (one record per finished session).
Output: the new bank state and the list of operations applied (add / update / merge /
delete), which becomes the consolidation's audit event. Pure and deterministic: the
same bank and evidence always give the same result.

Rules, in order:
1. usage: each entry a session recalled gains `uses` (and `failures` if that session lost);
2. search priorities: a won episode teaches "object -> where it was seen" (entry per object type);
3. task-type plans: a won episode with a task type and committed subgoals updates that type's plan;
4. notes: a note close to an existing entry of its category reinforces it (update), else is added;
   notes starting with "avoid", "don't", "never" or "mistake" go to `mistakes`;
5. merge: near-duplicate entries of one category merge into the older one;
6. delete: an entry recalled mostly by losing sessions (failures >= 2 and > evidence) is deleted
   (it must happen before the entry reaches the veto of 3 uses);
7. cap: a category over its cap loses its weakest entries (evidence + uses).
Pinned entries are never changed, merged or deleted; an entry used >= 3 times is never deleted.
"""

from __future__ import annotations

import copy
import re

from service.harness.experience import words

CATEGORIES = ("general", "task_type", "mistakes", "search_priority", "notes")
DEFAULT_CAP = 80
DELETE_VETO_USES = 3
NOTE_DUP = 0.6
MERGE_DUP = 0.8
_MISTAKE = re.compile(r"^\s*(avoid|don'?t|never|mistake)\b", re.I)


def new_bank(cap: int = DEFAULT_CAP) -> dict:
    return {
        "entries": {},
        "caps": {c: cap for c in CATEGORIES},
        "controls": {"disabled_verbs": [], "harness_cap": None},
        "next_id": 1,
        "episodes": 0,
        "wins": 0,
    }


def jaccard(a: str, b: str) -> float:
    wa, wb = words(a), words(b)
    return len(wa & wb) / len(wa | wb) if wa and wb else 0.0


class _Bank:
    def __init__(self, state: dict, stamp: int):
        self.s = copy.deepcopy(state)
        self.stamp = stamp
        self.ops: list[dict] = []

    @property
    def entries(self) -> dict:
        return self.s["entries"]

    def add(self, category: str, text: str, key: str | None = None, data: dict | None = None) -> dict:
        eid = f"e{self.s['next_id']}"
        self.s["next_id"] += 1
        e = {"id": eid, "category": category, "key": key, "text": text, "evidence": 1, "uses": 0,
             "failures": 0, "pinned": False, "data": data or {}, "created_in": self.stamp, "updated_in": self.stamp}
        self.entries[eid] = e
        self.ops.append({"op": "add", "id": eid, "category": category, "text": text})
        return e

    def update(self, e: dict, why: str, **fields) -> None:
        e.update(fields)
        e["evidence"] += 1
        e["updated_in"] = self.stamp
        self.ops.append({"op": "update", "id": e["id"], "why": why, "text": e["text"]})

    def delete(self, e: dict, why: str) -> None:
        del self.entries[e["id"]]
        self.ops.append({"op": "delete", "id": e["id"], "why": why})

    def by_key(self, key: str) -> dict | None:
        return next((e for e in self.entries.values() if e.get("key") == key), None)

    def deletable(self, e: dict) -> bool:
        return not e["pinned"] and e["uses"] < DELETE_VETO_USES


def count_usage(b: _Bank, ev: dict) -> None:
    """Rule 1 (shared by every evolver): episodes, wins, and uses/failures of recalled entries."""
    b.s["episodes"] += 1
    b.s["wins"] += bool(ev.get("won"))
    for eid in ev.get("recalled", []):
        e = b.entries.get(eid)
        if e and not e["pinned"]:
            e["uses"] += 1
            e["failures"] += 0 if ev.get("won") else 1


def consolidate(bank: dict, evidence: list[dict], stamp: int) -> tuple[dict, list[dict]]:
    """Apply the rules to `evidence` (sorted by session id for determinism); `stamp` = new bank version."""
    b = _Bank(bank, stamp)
    evidence = sorted(evidence, key=lambda ev: ev.get("session_id", ""))
    for ev in evidence:
        count_usage(b, ev)
        if ev.get("won"):
            _learn_places(b, ev)
            _learn_plan(b, ev)
        for note in ev.get("notes", []):
            _learn_note(b, note)
    _merge(b)
    for e in list(b.entries.values()):  # 6. delete
        if b.deletable(e) and e["failures"] >= 2 and e["failures"] > e["evidence"]:
            b.delete(e, f"recalled by {e['failures']} losing episodes")
    _enforce_caps(b)
    return b.s, b.ops


def _learn_places(b: _Bank, ev: dict) -> None:
    for obj, recep in ev.get("found", []):
        key = f"where:{obj}"
        e = b.by_key(key)
        if e is not None and e["pinned"]:
            continue
        counts = dict(e["data"].get("places", {})) if e else {}
        counts[recep] = counts.get(recep, 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        text = f"{obj} is usually at " + ", ".join(r for r, _ in ranked[:4])
        if e is None:
            b.add("search_priority", text, key, {"places": counts})
        else:
            b.update(e, "seen again in a won episode", text=text, data={"places": counts})


def _learn_plan(b: _Bank, ev: dict) -> None:
    tt, plan = ev.get("task_type"), ev.get("plan") or []
    if not tt or not plan:
        return
    key = f"plan:{tt}"
    text = f"{tt}: " + " -> ".join(plan[:8])
    e = b.by_key(key)
    if e is None:
        b.add("task_type", text, key)
    elif not e["pinned"]:
        b.update(e, "plan of a won episode", text=text)


def _learn_note(b: _Bank, note: str) -> None:
    cat = "mistakes" if _MISTAKE.match(note) else "notes"
    best, score = None, 0.0
    for e in b.entries.values():
        if e["category"] == cat:
            j = jaccard(e["text"], note)
            if j > score:
                best, score = e, j
    if best is not None and score >= NOTE_DUP:
        if not best["pinned"]:
            b.update(best, f"note reinforced it (similarity {score:.2f})")
        return
    b.add(cat, note.strip())


def _merge(b: _Bank) -> None:
    ids = sorted(b.entries, key=lambda i: int(i[1:]))
    for i, a_id in enumerate(ids):
        a = b.entries.get(a_id)
        if a is None or a["pinned"] or a.get("key"):
            continue
        for c_id in ids[i + 1:]:
            c = b.entries.get(c_id)
            if c is None or c["pinned"] or c.get("key") or c["category"] != a["category"]:
                continue
            if jaccard(a["text"], c["text"]) >= MERGE_DUP:
                a["evidence"] += c["evidence"]
                a["uses"] += c["uses"]
                a["failures"] += c["failures"]
                a["updated_in"] = b.stamp
                del b.entries[c_id]
                b.ops.append({"op": "merge", "id": a_id, "from": c_id})


def _enforce_caps(b: _Bank) -> None:
    for cat, cap in b.s["caps"].items():
        members = [e for e in b.entries.values() if e["category"] == cat]
        excess = len(members) - cap
        if excess <= 0:
            continue
        victims = sorted((e for e in members if b.deletable(e)),
                         key=lambda e: (e["evidence"] + e["uses"], -int(e["id"][1:])))
        for e in victims[:excess]:
            b.delete(e, f"{cat} over its cap of {cap}")
