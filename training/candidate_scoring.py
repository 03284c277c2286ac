"""python -m training.candidate_scoring --model models/default-policy --rows data/heldout/inline.jsonl

Candidate scoring: pick the environment action by its whole log-probability instead of committing token by token.

Grammar-constrained greedy decoding (what the service does) chooses at the first token where the admissible actions
diverge: ``go`` collects the mass of every ``go to X``, so with ten receptacles in view the policy can walk away from
the one ``take X from Y`` it rates highest of all. Candidate scoring keeps the greedy ``<think>`` and the greedy
choice between a harness call and an environment action, then scores every admissible action ``a`` as
``log p(a </action><|im_end|> | prompt, think)`` and takes the best. One forward over the prompt (KV cache), then one
short forward per candidate on that cache.

``compare`` measures both rules on the same held-out teacher turns (``training.constrained_eval`` rows).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import torch

from service.policy.engines.base import GenerationRequest
from service.policy.grammar import max_tokens_for, response_regex
from service.policy.parse import parse
from service.policy.wire import ACTION_CLOSE, ACTION_OPEN, IM_END


@torch.no_grad()
def score_actions(model, tok, context: str, actions: list[str]) -> list[float]:
    """``log p(action + </action><|im_end|> | context)`` for each action; ``context`` ends with ``<action>``."""
    ctx_ids = tok(context, add_special_tokens=False)["input_ids"]
    out = model(input_ids=torch.tensor([ctx_ids]), use_cache=True)
    cache, first = out.past_key_values, torch.log_softmax(out.logits[0, -1].float(), -1)
    scores = []
    for action in actions:
        full = tok(context + action + ACTION_CLOSE + IM_END, add_special_tokens=False)["input_ids"]
        if full[:len(ctx_ids)] != ctx_ids:   # the action's first token merged with the context's last: re-read it
            raise ValueError(f"tokenization of {action!r} does not extend the context")
        rest = full[len(ctx_ids):]
        total = float(first[rest[0]])
        if len(rest) > 1:
            step = model(input_ids=torch.tensor([rest[:-1]]), past_key_values=cache, use_cache=True)
            logp = torch.log_softmax(step.logits[0].float(), -1)
            total += float(sum(logp[i, t] for i, t in enumerate(rest[1:])))
            cache.crop(len(ctx_ids))
        scores.append(total)
    return scores


def rescore(model, tok, prompt: str, greedy_text: str, admissible: list[str], verbs: list[str]) -> str:
    """The action candidate scoring picks, given the greedy response (its think and harness/env choice are kept)."""
    greedy = parse(greedy_text, admissible, verbs)
    if greedy.kind != "env" or ACTION_OPEN not in greedy_text or len(admissible) < 2:
        return greedy.action
    context = prompt + greedy_text[:greedy_text.index(ACTION_OPEN) + len(ACTION_OPEN)]
    scores = score_actions(model, tok, context, admissible)
    return admissible[max(range(len(admissible)), key=scores.__getitem__)]


def compare(model, tok, rows: list[dict]) -> dict:
    """Exact action of greedy decoding and of candidate scoring on the same turns (overall and on decision turns)."""
    from training.constrained_eval import is_decision
    from training.hf_engine import HFEngine

    engine = HFEngine(model, tok)
    tally = {"greedy": [], "candidates": [], "greedy_decision": [], "candidates_decision": []}
    for r in rows:
        adm, verbs = r["admissible"], r["verbs"]
        gen = engine.generate_sync(GenerationRequest(prompt=r["prompt"], regex=response_regex(adm, verbs),
                                                     max_tokens=max_tokens_for(adm, verbs)))
        want = parse(r["completion"].replace(IM_END, ""), adm, verbs).action
        got = {"greedy": parse(gen.text, adm, verbs).action,
               "candidates": rescore(model, tok, r["prompt"], gen.text, adm, verbs)}
        for rule, action in got.items():
            tally[rule].append(int(action == want))
            if r["kind"] == "env" and is_decision(want):
                tally[f"{rule}_decision"].append(int(action == want))
    return {"turns": len(rows), **{k: round(sum(v) / len(v), 3) if v else None for k, v in tally.items()},
            "decision_turns": len(tally["greedy_decision"])}


@dataclass
class CandidateConfig:
    """Greedy vs candidate scoring on teacher turns."""

    model: str = field(metadata={"help": "policy folder (a policy.json folder is merged first) or HF model folder"})
    rows: str = field(metadata={"help": "teacher rows (<teacher>/<mode>.jsonl) of games the model never trained on"})
    out: str | None = field(default=None, metadata={"help": "report JSON (printed either way)"})
    n: int = field(default=60, metadata={"help": "environment turns sampled (all when fewer)"})
    seed: int = field(default=0, metadata={"help": "sampling seed"})
    threads: int = field(default=1, metadata={"help": "torch threads"})


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from service.policy.pretrained import resolve_policy_dir
    from training import cli

    cfg = cli.parse(CandidateConfig, argv, __doc__)
    torch.set_num_threads(cfg.threads)
    folder = str(resolve_policy_dir(Path(cfg.model)))
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    rows = [r for r in map(json.loads, Path(cfg.rows).read_text().splitlines())
            if r["kind"] == "env" and r.get("source", "search") != "dagger"]
    rows = random.Random(cfg.seed).sample(rows, min(cfg.n, len(rows)))
    report = {"model": cfg.model, "rows": cfg.rows, **compare(model, tok, rows)}
    if cfg.out:
        Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
