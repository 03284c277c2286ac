"""An ``Engine`` over a transformers model in the training process, with the service's grammar enforced by xgrammar.

Used where vLLM would need a reload per update: GRPO rollouts (the weights change every update) and quick
constrained-accuracy checks during SFT. It takes the same ``GenerationRequest`` (prompt + regex from
``service.policy.grammar``) as the service's engines, masks every sampling step with an xgrammar matcher compiled
from that regex (the same library vLLM's structured outputs use), and returns the token ids and their log-probs in
``Generation.extra`` for the policy-gradient step. One request at a time, KV cache on.
"""

from __future__ import annotations

import time

import torch

from service.policy.engines.base import Generation, GenerationRequest


class HFEngine:
    def __init__(self, model, tokenizer, model_id: str = "hf-policy", seed: int = 0):
        import xgrammar as xgr

        self.model, self.tok, self.model_id = model, tokenizer, model_id
        vocab = model.config.vocab_size
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab, stop_token_ids=[tokenizer.eos_token_id])
        self.compiler = xgr.GrammarCompiler(info, max_threads=1)
        self.vocab = vocab
        self.eos = tokenizer.eos_token_id
        self.gen = torch.Generator().manual_seed(seed)
        self._xgr = xgr
        self.records: list[dict] = []   # per generation: prompt_ids, completion_ids, logprobs (GRPO reads these)

    async def start(self) -> None:
        return None

    async def ready(self) -> bool:
        return True

    async def close(self) -> None:
        return None

    @torch.no_grad()
    def generate_sync(self, req: GenerationRequest) -> Generation:
        xgr = self._xgr
        started = time.perf_counter()
        prompt_ids = self.tok(req.prompt, add_special_tokens=False)["input_ids"]
        matcher = xgr.GrammarMatcher(self.compiler.compile_regex(req.regex)) if req.regex else None
        mask = xgr.allocate_token_bitmask(1, self.vocab)
        was_training = self.model.training
        self.model.eval()
        dev = self.model.device
        ids = torch.tensor([prompt_ids], device=dev)
        past, out_ids, logps = None, [], []
        for _ in range(req.max_tokens):
            out = self.model(input_ids=ids, past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float().cpu()
            if matcher is not None:
                matcher.fill_next_token_bitmask(mask, 0)
                logits = logits.unsqueeze(0)
                xgr.apply_token_bitmask_inplace(logits, mask)
                logits = logits[0]
            if req.temperature and req.temperature > 0:
                probs = torch.softmax(logits / req.temperature, -1)
                token = int(torch.multinomial(probs, 1, generator=self.gen))
            else:
                token = int(torch.argmax(logits))
            logps.append(float(torch.log_softmax(logits / max(req.temperature or 1.0, 1e-6), -1)[token]))
            out_ids.append(token)
            if matcher is not None:
                matcher.accept_token(token)
                if matcher.is_terminated():
                    break
            if token == self.eos:
                break
            ids = torch.tensor([[token]], device=dev)
        if was_training:
            self.model.train()
        text_ids = [t for t in out_ids if t != self.eos]
        extra = {"prompt_ids": prompt_ids, "completion_ids": out_ids, "logprobs": logps}
        self.records.append(extra)
        return Generation(text=self.tok.decode(text_ids), prompt_tokens=len(prompt_ids),
                          completion_tokens=len(out_ids), seconds=time.perf_counter() - started,
                          model=self.model_id, finish_reason="stop",
                          extra=extra)

    async def generate(self, req: GenerationRequest) -> Generation:
        return self.generate_sync(req)
