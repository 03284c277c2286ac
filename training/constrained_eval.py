"""Accuracy of a policy on held-out teacher turns, decoded the way the service decodes: under the grammar.

For each turn the prompt is the renderer's text and the grammar allows exactly the admissible actions plus the verbs
the teacher's state allowed (both recorded in the teacher row). Greedy decoding; the decision is parsed with the
service parser and compared with the teacher's: exact action match, "kind" match (harness vs env), and exact action
on decision turns (take / move / heat / cool / clean / use / slice: where the expert's choice is never arbitrary,
unlike which receptacle to open next while searching).
"""

from __future__ import annotations

import random

from service.policy.engines.base import GenerationRequest
from service.policy.grammar import max_tokens_for, response_regex
from service.policy.parse import parse
from service.policy.wire import IM_END

DECISION_PREFIXES = ("take ", "move ", "put ", "heat ", "cool ", "clean ", "use ", "slice ")


def is_decision(action: str) -> bool:
    return action.startswith(DECISION_PREFIXES)


def constrained_accuracy(model, tok, rows: list[dict], n: int = 60, seed: int = 0) -> dict:
    from training.hf_engine import HFEngine

    if not rows or n <= 0:
        return {"turns": 0}
    engine = HFEngine(model, tok)
    sample = random.Random(seed).sample(rows, min(n, len(rows)))
    exact = kind = 0
    by_kind: dict[str, list[int]] = {}
    decision: list[int] = []
    for r in sample:
        adm, verbs = r["admissible"], r["verbs"]
        gen = engine.generate_sync(GenerationRequest(prompt=r["prompt"], regex=response_regex(adm, verbs),
                                                     max_tokens=max_tokens_for(adm, verbs)))
        want = parse(r["completion"].replace(IM_END, ""), adm, verbs)
        got = parse(gen.text, adm, verbs)
        ok = got.action == want.action
        exact += ok
        kind += got.kind == want.kind
        by_kind.setdefault(want.kind, []).append(int(ok))
        if want.kind == "env" and is_decision(want.action):
            decision.append(int(ok))
    return {"turns": len(sample), "exact_action": round(exact / len(sample), 3),
            "kind_match": round(kind / len(sample), 3),
            "exact_by_kind": {k: round(sum(v) / len(v), 3) for k, v in by_kind.items()},
            "decision_turns": len(decision),
            "exact_decision": round(sum(decision) / len(decision), 3) if decision else None}
