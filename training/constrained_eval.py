"""Accuracy of a policy on held-out teacher turns, decoded the way the service decodes: under the grammar.

For each turn the prompt is the renderer's text and the grammar allows exactly the admissible actions plus the verbs
the teacher's state allowed (read back from the prompt's system line). Greedy decoding; the decision is parsed with
the service parser and compared with the teacher's: exact action match, and "kind" match (harness vs env).
"""

from __future__ import annotations

import random
import re

from service.policy.engines.base import GenerationRequest
from service.policy.grammar import max_tokens_for, response_regex
from service.policy.parse import parse
from service.policy.render import VERB_HELP

_ADMISSIBLE = re.compile(r"^Admissible: (.*)$", re.MULTILINE)


def turn_constraint(prompt: str) -> tuple[list[str], list[str]]:
    """(admissible, verbs) as rendered into a prompt."""
    m = _ADMISSIBLE.search(prompt.split("<|im_end|>\n<|im_start|>assistant", 1)[0].replace("<|im_end|>", "\n"))
    admissible = m.group(1).split(" | ") if m else []
    system = prompt.split("<|im_end|>", 1)[0]
    verbs = [v for v, help_text in VERB_HELP.items() if help_text in system]
    return admissible, verbs


def constrained_accuracy(model, tok, rows: list[dict], n: int = 60, seed: int = 0) -> dict:
    from training.hf_engine import HFEngine

    if not rows:
        return {"turns": 0}
    engine = HFEngine(model, tok)
    sample = random.Random(seed).sample(rows, min(n, len(rows)))
    exact = kind = 0
    by_kind: dict[str, list[int]] = {}
    for r in sample:
        adm, verbs = turn_constraint(r["prompt"])
        gen = engine.generate_sync(GenerationRequest(prompt=r["prompt"], regex=response_regex(adm, verbs),
                                                     max_tokens=max_tokens_for(adm, verbs)))
        want = parse(r["completion"].replace("<|im_end|>", ""), adm, verbs)
        got = parse(gen.text, adm, verbs)
        ok = got.action == want.action
        exact += ok
        kind += got.kind == want.kind
        by_kind.setdefault(want.kind, []).append(int(ok))
    return {"turns": len(sample), "exact_action": round(exact / len(sample), 3),
            "kind_match": round(kind / len(sample), 3),
            "exact_by_kind": {k: round(sum(v) / len(v), 3) for k, v in by_kind.items()}}
