"""Seconds per SFT step of the bare model: the floor that the TRL step in training.sft is measured against.

    .venv/bin/python bench/sft_step.py --base data/base/smollm2-135m-instruct [--tokens 1160 --batch 4 --repeats 2]

One step is `batch` sequences of `tokens` random token ids, forward and backward one at a time (as the SFT stage's
gradient accumulation does), through the base with LoRA on the SFT stage's layers and targets. The loss falls on
a third of the positions through the tied head, about the share of completion tokens in an inline episode
(docs/training.md, session 34). Each precision is timed in a fresh model: fp32 weights under bf16 autocast (the
SFT stage on a CPU where training.hardware.bf16_autocast_pays()), bf16 weights, and plain fp32. The table gives the
mean of `repeats` steps after one warm-up step.
"""

from __future__ import annotations

import argparse
import time


def step_seconds(base: str, precision: str, tokens: int, batch: int, repeats: int, lora_from_layer: int) -> float:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from training.sft import LORA_TARGETS

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16 if precision == "bf16" else torch.float32)
    layers = list(range(lora_from_layer, model.config.num_hidden_layers))
    model = get_peft_model(model, LoraConfig(r=64, lora_alpha=128, target_modules=list(LORA_TARGETS),
                                             layers_to_transform=layers, task_type="CAUSAL_LM"))
    inner = model.base_model.model
    ids = torch.randint(0, model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))

    def one_step() -> None:
        for _ in range(batch):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "autocast"):
                hidden = inner.model(input_ids=ids).last_hidden_state[0, ::3]
                logits = inner.lm_head(hidden).float()
                loss = torch.nn.functional.cross_entropy(logits, ids[0, ::3])
            loss.backward()

    one_step()
    t0 = time.perf_counter()
    for _ in range(repeats):
        one_step()
    return (time.perf_counter() - t0) / repeats


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="data/base/smollm2-135m-instruct")
    ap.add_argument("--tokens", type=int, default=1160, help="tokens per sequence (an inline episode's mean)")
    ap.add_argument("--batch", type=int, default=4, help="sequences per step (training.sft's batch)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--lora-from-layer", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precisions", nargs="+", default=["autocast", "bf16", "fp32"],
                    choices=["autocast", "bf16", "fp32"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"| precision | s per step ({a.batch} x {a.tokens} tokens) |\n|---|---|")
    for p in a.precisions:
        print(f"| {p} | {step_seconds(a.base, p, a.tokens, a.batch, a.repeats, a.lora_from_layer):.1f} |", flush=True)


if __name__ == "__main__":
    main()
