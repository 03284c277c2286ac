"""Build a tiny, UNTRAINED default policy model fully offline, in seconds.

    python -m service.policy.bootstrap_model --out models/untrained-tiny

The result is a folder that vLLM and transformers load with ``HF_HUB_OFFLINE=1``:

* a byte-level BPE tokenizer trained here with ``tokenizers`` on a small built-in corpus (ALFWorld-like
  text, the wire format ``<think>...</think><action>...</action>``, the harness verbs), wrapped as a
  ``PreTrainedTokenizerFast`` with ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos) and a
  ChatML chat template whose assistant turns (content *and* ``<|im_end|>``) sit inside
  ``{% generation %}`` markers, so TRL's ``assistant_only_loss`` trains the stop token;
* a random-init ``Qwen3ForCausalLM`` (a few million parameters), deterministic from ``seed``,
  saved as safetensors with ``generation_config`` eos/pad set;
* ``MODEL_CARD.md`` stating that the weights are random.

The weights are random: the model "works" only in the sense that it loads and generates; every
useful property of its output comes from the grammar constraint applied at generation time.
``build_tiny_model`` is reused by training code with other sizes.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from service.harness.state import VERBS
from service.policy.wire import IM_END, IM_START, format_response

PAD = "<|endoftext|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END]

# ChatML (service.policy.wire.chatml as a Jinja template); the assistant content and its end-of-turn token are
# inside {% generation %} markers.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    f"{{{{ '{IM_START}assistant\\n' }}}}"
    "{%- generation -%}"
    f"{{{{ message['content'] }}}}{{{{ '{IM_END}' }}}}"
    "{%- endgeneration -%}"
    "{{ '\\n' }}"
    "{%- else -%}"
    f"{{{{ '{IM_START}' + message['role'] + '\\n' + message['content'] + '{IM_END}' + '\\n' }}}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    f"{{{{ '{IM_START}assistant\\n' }}}}"
    "{%- endif -%}"
)

DEFAULT_SIZE = dict(
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=4096,
)

# --- built-in corpus -------------------------------------------------------------------------------

_OBJECTS = [
    "apple", "bowl", "book", "bread", "butterknife", "candle", "cd", "cellphone", "cloth", "creditcard",
    "cup", "dishsponge", "egg", "fork", "glassbottle", "kettle", "keychain", "knife", "ladle", "laptop",
    "lettuce", "mug", "newspaper", "pan", "pen", "pencil", "peppershaker", "pillow", "plate", "pot",
    "potato", "remotecontrol", "saltshaker", "soapbar", "soapbottle", "spatula", "spoon", "spraybottle",
    "statue", "tissuebox", "toiletpaper", "tomato", "towel", "vase", "watch", "winebottle", "desklamp",
    "floorlamp", "alarmclock", "baseballbat", "basketball", "box", "houseplant", "handtowel",
]
_RECEPTACLES = [
    "armchair", "bathtubbasin", "bed", "cabinet", "coffeemachine", "coffeetable", "countertop", "desk",
    "diningtable", "drawer", "dresser", "fridge", "garbagecan", "handtowelholder", "laundryhamper",
    "microwave", "ottoman", "safe", "shelf", "sidetable", "sinkbasin", "sofa", "stoveburner", "toaster",
    "toilet", "toiletpaperhanger", "towelholder", "tvstand",
]
_TASKS = [
    "put a {o} in {r}.", "put some {o} on {r}.", "clean some {o} and put it in {r}.",
    "heat some {o} and put it in {r}.", "cool some {o} and put it in {r}.",
    "put two {o} in {r}.", "look at {o} under the desklamp.", "examine the {o} with the desklamp.",
]
_ENV_ACTIONS = [
    "go to {r} {n}", "open {r} {n}", "close {r} {n}", "take {o} {n} from {r} {m}", "move {o} {n} to {r} {m}",
    "put {o} {n} in/on {r} {m}", "heat {o} {n} with microwave 1", "cool {o} {n} with fridge 1",
    "clean {o} {n} with sinkbasin 1", "use desklamp {n}", "examine {r} {n}", "look", "inventory",
]
_THOUGHTS = [
    "i need to find the {o} first", "the {o} is probably in the {r}", "i should check the {r} next",
    "i have the {o} now, go to the {r}", "the {r} is closed, open it", "nothing here, try another place",
    "remember where the {o} was found", "the task is done when the {o} is in the {r}",
    "plan: find, take, then place", "let me look up what i saw before",
]
_GENERIC = (
    "The quick brown fox jumps over the lazy dog. A policy reads an observation and answers with one action. "
    "Every step costs budget, so useless calls cost as much as useless moves. The service keeps state in a "
    "store, writes an audit log, and reports metrics. Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 20 42 100. "
    "Punctuation: , . ; : ! ? ( ) [ ] { } < > / - _ = + * & % $ # @ ' \" . "
    "Objective, observation, admissible actions, recent history, belief, progress, experience, subgoal, "
    "insight, query, result, status, open, partial, complete, blocked, dropped, success, failure, invalid. "
    "You are in the middle of a room. Looking quickly around you, you see nothing special. "
    "On the desk, you see a pen, a book and a laptop. The drawer is open. In it, you see nothing. "
    "You pick up the apple from the countertop. You put the mug in the coffeemachine. "
    "Nothing happens. You arrive at the fridge. The fridge is closed. You open the fridge. "
)


def _corpus(seed: int = 0, n_lines: int = 3000) -> list[str]:
    rnd = random.Random(seed)
    lines = [_GENERIC] * 20
    for _ in range(n_lines):
        o, r = rnd.choice(_OBJECTS), rnd.choice(_RECEPTACLES)
        n, m = rnd.randint(1, 12), rnd.randint(1, 12)
        fill = dict(o=o, r=r, n=n, m=m)
        seen = ", ".join(f"a {rnd.choice(_RECEPTACLES)} {rnd.randint(1, 9)}" for _ in range(rnd.randint(2, 6)))
        lines.append(f"You are in the middle of a room. Looking quickly around you, you see {seen}.")
        lines.append("Your task is to: " + rnd.choice(_TASKS).format(**fill))
        env = rnd.choice(_ENV_ACTIONS).format(**fill)
        verb = rnd.choice(VERBS)
        harness = {
            "track": f"track [{o}]",
            "commit": f"commit [find {o} then put it in {r}]",
            "recall": f"recall [where is {o}]",
            "note": f"note [{o} is often in {r}]",
        }[verb]
        act = rnd.choice([env, env, harness])
        thought = rnd.choice(_THOUGHTS).format(**fill)
        lines.append(format_response(thought, act))
        lines.append(f"On the {r} {n}, you see a {o} {m}. {o} {m} @ {r} {n}.")
        lines.append(f"Admissible actions: {env}, go to {rnd.choice(_RECEPTACLES)} {m}, look, inventory")
        lines.append(f"{IM_START}user\nObservation: you arrive at {r} {n}.{IM_END}\n"
                     f"{IM_START}assistant\n{format_response(thought, act)}{IM_END}")
    return lines


def _train_tokenizer(vocab_size: int, seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token=IM_END,
        pad_token=PAD,
        unk_token=None,
        additional_special_tokens=[IM_START],
        model_max_length=DEFAULT_SIZE["max_position_embeddings"],
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(out_dir: str | Path, seed: int = 0, vocab_size: int = 1536, dtype: str = "bfloat16",
                     **size) -> Path:
    """Build tokenizer + random-init Qwen3 into ``out_dir``; deterministic from ``seed``.

    ``size`` overrides fields of :data:`DEFAULT_SIZE` (any ``Qwen3Config`` field is accepted).
    Returns the output directory.
    """
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer(vocab_size, seed)
    cfg_kw = {**DEFAULT_SIZE, **size}
    if "max_position_embeddings" in size:
        tok.model_max_length = size["max_position_embeddings"]
    # Round the embedding table up to a multiple of 64 (kernels like it); ids beyond the tokenizer are never sampled
    # under a grammar constraint, and the untrained model is random anyway.
    n_vocab = len(tok)
    padded_vocab = (n_vocab + 63) // 64 * 64
    config = Qwen3Config(
        vocab_size=padded_vocab,
        bos_token_id=None,
        eos_token_id=tok.convert_tokens_to_ids(IM_END),
        pad_token_id=tok.convert_tokens_to_ids(PAD),
        tie_word_embeddings=True,
        rope_theta=10000.0,
        dtype=dtype,
        **cfg_kw,
    )
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    # Re-initialise explicitly from our own generator so the weights depend only on `seed` and the sizes.
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * config.initializer_range)
            elif "norm" in name:
                p.fill_(1.0)
            else:
                p.zero_()
    model = model.to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        bos_token_id=None,
        do_sample=True,
        temperature=1.0,
    )
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    n_params = sum(p.numel() for p in model.parameters())
    card = f"""# UNTRAINED: random weights

This folder is the **untrained default policy** of EvoHarness: a `Qwen3ForCausalLM` with **random weights**
(seed {seed}), built offline in seconds by `python -m service.policy.bootstrap_model`. It has learned nothing.
It exists so that the service, vLLM and the tests have a real model to load without a model hub. Every
well-formed action it produces is the work of the grammar constraint applied at generation time, not of
the model. Replace it with a trained policy for any real use.

| field | value |
|---|---|
| architecture | Qwen3ForCausalLM |
| parameters | {n_params:,} |
| dtype | {dtype} |
| config | {json.dumps(cfg_kw)} |
| vocab | {n_vocab} tokenizer tokens (embedding rows {padded_vocab}) |
| tokenizer | byte-level BPE trained on a small built-in ALFWorld-like corpus |
| special tokens | `{PAD}` (pad), `{IM_START}`, `{IM_END}` (eos) |
| chat template | ChatML, assistant turns inside `{{% generation %}}` markers |
| seed | {seed} |
"""
    (out / "MODEL_CARD.md").write_text(card)
    (out / "UNTRAINED").write_text("random weights\n")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Build the tiny UNTRAINED default policy model (random weights).")
    ap.add_argument("--out", default="models/untrained-tiny")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab-size", type=int, default=1536)
    ap.add_argument("--hidden-size", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None)
    args = ap.parse_args(argv)
    size = {}
    if args.hidden_size:
        size["hidden_size"] = args.hidden_size
    if args.layers:
        size["num_hidden_layers"] = args.layers
    out = build_tiny_model(args.out, seed=args.seed, vocab_size=args.vocab_size, **size)
    print(f"built UNTRAINED (random weights) model in {out}")


if __name__ == "__main__":
    main()
