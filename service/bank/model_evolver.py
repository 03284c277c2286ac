"""The optional evolver that asks the served model for consolidation operations.

The model sees the bank and the pending evidence and answers JSON valid under `OPS_SCHEMA`
(vLLM structured outputs), e.g. {"ops": [{"op": "add", "category": "notes", "text": "..."}]}.
Its operations are applied under the same invariants as the rule evolver: pinned entries are
never changed, merged or deleted; an entry used >= 3 times is never deleted; unknown ids,
empty texts and ops on missing entries are rejected (and listed in the audit); caps still apply.
Usage counting (rule 1) stays deterministic.
"""

from __future__ import annotations

import json

from service.bank.evolver import CATEGORIES, _Bank, _enforce_caps, count_usage
from service.policy.engines.base import Engine, GenerationRequest
from service.policy.wire import chatml

MAX_OPS = 8
OPS_SCHEMA = {
    "type": "object",
    "properties": {
        "ops": {
            "type": "array",
            "maxItems": MAX_OPS,
            "items": {
                "type": "object",
                "properties": {
                    "op": {"enum": ["add", "update", "merge", "delete"]},
                    "id": {"type": "string", "maxLength": 8},
                    "from": {"type": "string", "maxLength": 8},
                    "category": {"enum": list(CATEGORIES)},
                    "text": {"type": "string", "maxLength": 120},
                },
                "required": ["op"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["ops"],
    "additionalProperties": False,
}


def render_request(bank: dict, evidence: list[dict], max_chars: int | None = None) -> str:
    """The consolidation prompt. With ``max_chars`` the bank and episodes shown fit that many characters (the
    engine's context is finite, a bank at its caps holds hundreds of entries): pinned and most used entries first,
    then the newest; the rest are counted as omitted (the model cannot change what it does not see)."""
    ranked = sorted(bank["entries"].values(), key=lambda e: (not e.get("pinned"), -e.get("uses", 0),
                                                             -e.get("evidence", 0), -e.get("updated_in", 0)))
    entries = [{k: e[k] for k in ("id", "category", "text", "evidence", "uses", "pinned")} for e in ranked]
    episodes = [{k: ev.get(k) for k in ("task_type", "won", "notes", "found", "plan")} for ev in evidence]
    if max_chars is not None:
        while episodes and len(json.dumps(episodes)) > max_chars // 2:
            episodes.pop()                          # not shown to the model (its usage still counts)
        room = max_chars - len(json.dumps(episodes))
        shown, used = [], 2
        for e in entries:
            used += len(json.dumps(e)) + 2
            if used > room:
                break
            shown.append(e)
        omitted, entries = len(entries) - len(shown), shown
    else:
        omitted = 0
    note = f" ({omitted} more entries not shown)" if omitted else ""
    return chatml([
        {"role": "system", "content": "You maintain an experience bank of lessons for an agent. Answer JSON "
                                      "{\"ops\": [...]} with add/update/merge/delete operations; keep it compact."},
        {"role": "user", "content": f"Bank{note}: {json.dumps(entries)}\nEpisodes: {json.dumps(episodes)}"},
    ])


def apply_ops(bank: dict, evidence: list[dict], ops: list[dict], stamp: int) -> tuple[dict, list[dict], list[dict]]:
    """Returns (new bank, applied ops, rejected ops with a reason)."""
    b = _Bank(bank, stamp)
    for ev in sorted(evidence, key=lambda ev: ev.get("session_id", "")):
        count_usage(b, ev)
    rejected = []
    for op in ops[:MAX_OPS]:
        kind, e = op.get("op"), b.entries.get(op.get("id", ""))
        text = (op.get("text") or "").strip()
        if kind == "add":
            if not text or op.get("category") not in CATEGORIES:
                rejected.append({**op, "why": "add needs a category and a text"})
            else:
                b.add(op["category"], text)
        elif e is None:
            rejected.append({**op, "why": "no such entry"})
        elif e["pinned"]:
            rejected.append({**op, "why": "entry is pinned"})
        elif kind == "update":
            if not text:
                rejected.append({**op, "why": "update needs a text"})
            else:
                b.update(e, "model", text=text)
        elif kind == "delete":
            if not b.deletable(e):
                rejected.append({**op, "why": "entry used 3 times or more"})
            else:
                b.delete(e, "model")
        else:  # merge `from` into `id`
            src = b.entries.get(op.get("from", ""))
            if src is None or src is e or not b.deletable(src) or src["category"] != e["category"]:
                rejected.append({**op, "why": "merge needs another deletable entry of the same category"})
            else:
                for k in ("evidence", "uses", "failures"):
                    e[k] += src[k]
                del b.entries[src["id"]]
                b.ops.append({"op": "merge", "id": e["id"], "from": src["id"]})
    _enforce_caps(b)
    return b.s, b.ops, rejected


async def consolidate_with_model(engine: Engine, bank: dict, evidence: list[dict], stamp: int,
                                 max_tokens: int = 512, max_chars: int | None = None) -> tuple[dict, list[dict], dict]:
    prompt = render_request(bank, evidence, max_chars)
    gen = await engine.generate(GenerationRequest(prompt=prompt, json_schema=OPS_SCHEMA,
                                                  max_tokens=max_tokens, temperature=0.0))
    try:
        ops = json.loads(gen.text).get("ops", [])
        parse_error = None
    except json.JSONDecodeError as e:  # cut off by max_tokens: apply nothing from the model
        ops, parse_error = [], f"unparseable model output ({e.msg})"
    new, applied, rejected = apply_ops(bank, evidence, ops, stamp)
    info = {"model": gen.model, "rejected": rejected, "raw": gen.text[:2000], "error": parse_error,
            "usage": {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens,
                      "seconds": round(gen.seconds, 6)}}
    return new, applied, info
