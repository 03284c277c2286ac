"""Where the SFT stage's tokens go, by teacher mode: the cost side of choosing `sft_modes`.

    .venv/bin/python bench/sft_token_budget.py --data data/teacher --base data/base/smollm2-135m-instruct \\
        [--modes '{"inline": 1.0, "always_on": 0.2}'] [--steps 300 --batch 4]

SFT (training.sft) trains `steps x batch` whole episodes drawn from the kept episodes of each mode, so each mode's
share of the step time is about its share of the kept episodes' compute. This script builds the same episodes as
the SFT stage (`load_rows` -> `episodes_of` -> `tokenize_episode`, the same tokenizer and max_length), and prints
per mode: episodes, tokens per episode, loss tokens, and a compute estimate per episode in which each token costs
its decoder layers plus attention over the tokens before it, and each loss token the vocabulary head
(bench/roofline.py's `flops_per_token`). The last table projects the SFT stage's wall time from a measured
seconds-per-step figure for every mode mix given with --mix.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.roofline import flops_per_token  # noqa: E402
from training.sft import SFTRunConfig, episodes_of, load_rows, tokenize_episode  # noqa: E402


def episode_cost(cfg, n: int, n_loss: int, attention: bool = True) -> float:
    """Forward FLOPs of one sequence of n tokens, n_loss of them scored (the vocabulary head runs at those only, as
    in training.sft): bench/roofline.py's per-token count, summed over positions (closed form)."""
    body = flops_per_token(cfg, 0, with_head=False)
    head = flops_per_token(cfg, 0, with_head=True) - body
    per_position = flops_per_token(cfg, 1, with_head=False) - body if attention else 0
    return body * n + per_position * n * (n - 1) / 2 + head * n_loss


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/teacher")
    ap.add_argument("--base", default="data/base/smollm2-135m-instruct")
    ap.add_argument("--modes", default='{"inline": 1.0, "always_on": 0.2}', help="the SFT stage's mode shares")
    ap.add_argument("--mix", action="append", default=[],
                    help="another mode mix to project (JSON); may be given several times")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seconds-per-step", type=float, default=15.0,
                    help="measured SFT seconds per step with --modes (session 25's card: 4,364 s / 300 steps)")
    args = ap.parse_args(argv)

    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.base)
    mc = AutoConfig.from_pretrained(args.base)

    # every mode once, at share 1, so any mix can be projected from the same episodes
    every = json.loads(args.modes) | {m: 1.0 for m in json.loads(args.modes)}
    for mix in args.mix:
        every |= {m: 1.0 for m in json.loads(mix)}
    cfg = SFTRunConfig(data=args.data, modes=every)
    rows, _ = load_rows(cfg)
    per_mode: dict[str, list[tuple[int, int, float]]] = {}
    for ep in episodes_of(rows):
        t = tokenize_episode(tok, ep, cfg.max_length)
        n, n_loss = len(t["input_ids"]), sum(t["completion_mask"])
        per_mode.setdefault(ep["mode"], []).append((n, n_loss, episode_cost(mc, n, n_loss)))

    print("| mode | episodes | tokens/ep | loss tokens/ep | loss share | GFLOP/ep (forward) | attention share |")
    print("|---|---|---|---|---|---|---|")
    for mode, eps in sorted(per_mode.items()):
        k = len(eps)
        tok_ep = sum(e[0] for e in eps) / k
        loss_ep = sum(e[1] for e in eps) / k
        cost_ep = sum(e[2] for e in eps) / k
        attention = sum(e[2] - episode_cost(mc, e[0], e[1], attention=False) for e in eps) / k
        print(f"| {mode} | {k} | {tok_ep:.0f} | {loss_ep:.0f} | {loss_ep / tok_ep:.1%} | {cost_ep / 1e9:.0f} | "
              f"{attention / cost_ep:.1%} |")

    def mean_cost(mix: dict) -> tuple[float, dict]:
        """Compute per drawn episode when each mode keeps `share` of its episodes, and each mode's compute share."""
        kept = {m: per_mode.get(m, []) for m, s in mix.items() if s > 0}
        weights = {m: s * len(kept[m]) for m, s in mix.items() if m in kept}
        total_w = sum(weights.values())
        means = {m: sum(e[2] for e in eps) / len(eps) for m, eps in kept.items() if eps}
        cost = sum(weights[m] * means[m] for m in means) / total_w
        return cost, {m: weights[m] * means[m] / (cost * total_w) for m in means}

    base_cost, _ = mean_cost(json.loads(args.modes))
    print(f"\nProjected SFT stage ({args.steps} steps x {args.batch} episodes; {args.seconds_per_step:g} s/step "
          f"measured with {args.modes}):\n")
    print("| modes | compute per episode vs measured mix | compute share by mode | projected s/step | projected min |")
    print("|---|---|---|---|---|")
    for mix_text in [args.modes, *args.mix]:
        cost, shares = mean_cost(json.loads(mix_text))
        sps = args.seconds_per_step * cost / base_cost
        share_text = ", ".join(f"{m} {v:.0%}" for m, v in shares.items())
        print(f"| `{mix_text}` | {cost / base_cost:.2f} | {share_text} | {sps:.1f} | {sps * args.steps / 60:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
