"""Base models: a local byte-level BPE tokenizer + tiny random-init Qwen3 configurations, or a pretrained checkpoint.

    CPU:  python -m training.model_init --size nano --corpus data/teacher --out runs/base-nano
    GPU:  (pretrained + LoRA: nothing to build) python -m training.sft --base /models/Qwen3-1.7B --lora ...

From scratch (``--size``): the tokenizer is trained on the teacher's rendered prompts and completions (the exact text
the policy reads and writes) mixed with the generic corpus of ``service.policy.bootstrap_model`` so that rare words
still get merges; object and receptacle names end up as single tokens, which makes the copy-from-prompt part of the
task a one-token choice. The model is a random-init ``Qwen3ForCausalLM`` saved as safetensors with the tokenizer,
the ChatML template (assistant turns inside ``{% generation %}``) and ``generation_config`` eos/pad set.

Pretrained (``BaseModelConfig.pretrained``): a local Hugging Face folder (e.g. Qwen3-1.7B) is used as is; SFT then
wraps it with a peft LoRA adapter (``SFTConfig.lora``) and ``training.export`` merges it back.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

from service.policy.bootstrap_model import (
    CHAT_TEMPLATE,
    PAD,
    SPECIAL_TOKENS,
    _corpus,
)
from service.policy.wire import IM_END, IM_START

# name -> Qwen3Config fields. Approximate parameter counts with the ~1.2k-token vocabulary the BPE reaches on game
# text (tied embeddings); nano measured 0.94 M.
SIZES = {
    "pico": {"hidden_size": 96, "intermediate_size": 256, "num_hidden_layers": 3, "num_attention_heads": 3,
         "num_key_value_heads": 1, "head_dim": 32},                                   # ~0.4 M
    "nano": {"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 32},                                   # ~0.9 M
    "micro": {"hidden_size": 192, "intermediate_size": 512, "num_hidden_layers": 6, "num_attention_heads": 6,
          "num_key_value_heads": 2, "head_dim": 32},                                  # ~2.6 M
    "small": {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 8, "num_attention_heads": 8,
          "num_key_value_heads": 2, "head_dim": 32},                                  # ~5.5 M
    "base": {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 8, "num_attention_heads": 8,
         "num_key_value_heads": 4, "head_dim": 64},                                   # ~22 M
}


@dataclass
class BaseModelConfig:
    """How the base model is obtained."""

    size: str = "nano"                 # key of SIZES (from scratch); ignored when `pretrained` is set
    pretrained: str | None = None      # local HF folder (Qwen3-0.6B/1.7B/8B); SFT then uses LoRA
    vocab_size: int = 4096             # BPE vocabulary (from scratch)
    max_position_embeddings: int = 2048
    corpus: list[str] = field(default_factory=lambda: ["data/teacher"])  # folders/files of teacher JSONL
    max_corpus_rows: int = 20000       # rows of teacher text used for the tokenizer
    seed: int = 0
    dtype: str = "float32"             # training dtype on CPU; export writes bfloat16


def teacher_text(paths: list[str], limit: int) -> list[str]:
    """Prompts + completions from teacher JSONL files (a folder means all its *.jsonl)."""
    files = []
    for p in map(Path, paths):
        files += sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
    rows = []
    for f in files:
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if "prompt" in r:
                rows.append(r["prompt"] + r["completion"])
            if len(rows) >= limit:
                return rows
    return rows


def train_tokenizer(texts: list[str], vocab_size: int, max_len: int):
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token=IM_END, pad_token=PAD,
                                   unk_token=None, additional_special_tokens=[IM_START], model_max_length=max_len,
                                   padding_side="left", clean_up_tokenization_spaces=False)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_from_scratch(cfg: BaseModelConfig, out: str | Path) -> Path:
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    texts = teacher_text(cfg.corpus, cfg.max_corpus_rows) + _corpus(cfg.seed, 1500)
    tok = train_tokenizer(texts, cfg.vocab_size, cfg.max_position_embeddings)
    n_vocab = len(tok)
    config = Qwen3Config(vocab_size=(n_vocab + 63) // 64 * 64, bos_token_id=None,
                         eos_token_id=tok.convert_tokens_to_ids(IM_END), pad_token_id=tok.convert_tokens_to_ids(PAD),
                         tie_word_embeddings=True, rope_theta=10000.0, dtype=cfg.dtype,
                         max_position_embeddings=cfg.max_position_embeddings, **SIZES[cfg.size])
    torch.manual_seed(cfg.seed)
    model = Qwen3ForCausalLM(config).to(getattr(torch, cfg.dtype))
    model.generation_config = GenerationConfig(eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id,
                                               bos_token_id=None)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    meta = {"size": cfg.size, "params": sum(p.numel() for p in model.parameters()), "tokenizer_vocab": n_vocab,
            "corpus_rows": len(texts), "config": SIZES[cfg.size]}
    (out / "base_model.json").write_text(json.dumps(meta, indent=1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build a tiny from-scratch base model (tokenizer + random Qwen3).")
    ap.add_argument("--size", default="nano", choices=sorted(SIZES))
    ap.add_argument("--corpus", nargs="+", default=["data/teacher"])
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    cfg = BaseModelConfig(size=args.size, corpus=args.corpus, vocab_size=args.vocab_size, seed=args.seed)
    out = build_from_scratch(cfg, args.out)
    print(json.loads((out / "base_model.json").read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
