"""python -m training.model_init --size nano --corpus data/teacher --out runs/base-nano

Base models: a local byte-level BPE tokenizer + tiny random-init Qwen3 configurations, or a pretrained checkpoint.
Settings: ``ModelInitConfig`` (``--help`` lists them; ``--config FILE.json`` reads them from a file, see
``training.cli``).

    GPU:  (pretrained + LoRA: nothing to build) python -m training.sft --base /models/Qwen3-1.7B --lora ...

From scratch (``--size``): the tokenizer is trained on the teacher's rendered prompts and completions (the exact text
the policy reads and writes) mixed with the generic corpus of ``service.policy.bootstrap_model`` so that rare words
still get merges; object and receptacle names end up as single tokens, which makes the copy-from-prompt part of the
task a one-token choice. The model is a random-init ``Qwen3ForCausalLM`` saved as safetensors with the tokenizer,
the ChatML template (assistant turns inside ``{% generation %}``) and ``generation_config`` eos/pad set.

Pretrained: a local Hugging Face folder (e.g. Qwen3-1.7B) is used as is, with no stage here; SFT wraps it with a
peft LoRA adapter (``SFTRunConfig.lora``) and ``training.export`` merges it back.
"""

from __future__ import annotations

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
from training import cli

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
    """How a from-scratch base model is built."""

    size: str = field(default="nano", metadata={"help": "model size", "choices": sorted(SIZES)})
    vocab_size: int = field(default=4096, metadata={"help": "BPE vocabulary"})
    max_position_embeddings: int = field(default=2048, metadata={"help": "context length"})
    corpus: list[str] = field(default_factory=lambda: ["data/teacher"], metadata={
        "help": "folders/files of teacher JSONL for the tokenizer"})
    max_corpus_rows: int = field(default=20000, metadata={"help": "rows of teacher text used for the tokenizer"})
    seed: int = field(default=0, metadata={"help": "seed"})
    dtype: str = field(default="float32", metadata={"help": "training dtype on CPU; export writes bfloat16"})


@dataclass(kw_only=True)
class ModelInitConfig(BaseModelConfig):
    """The command's settings: the base model's, and where it goes."""

    out: str = field(metadata={"help": "output folder"})


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


def parse_args(argv: list[str] | None = None) -> ModelInitConfig:
    return cli.parse(ModelInitConfig, argv, __doc__)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    out = build_from_scratch(cfg, cfg.out)
    print(json.loads((out / "base_model.json").read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
