"""In-process vLLM engine with a (random) PEFT LoRA adapter on the tiny random-weight Qwen3."""

from __future__ import annotations

import asyncio
import re

import pytest

from service.policy.engines.base import GenerationRequest
from service.policy.engines.vllm_local import VLLMEngine

pytestmark = pytest.mark.timeout(600)


async def test_generation_with_lora_adapter(tiny_model, tiny_lora, action_regex, prompt):
    eng = VLLMEngine(tiny_model, adapter=tiny_lora, adapter_name="random-lora", max_model_len=2048,
                     kv_cache_gib=None, enforce_eager=True, max_lora_rank=8)  # None: CPU default size
    assert eng.model_id == "untrained-tiny+random-lora"
    await eng.start()
    try:
        gens = await asyncio.gather(*(
            eng.generate(GenerationRequest(prompt=prompt, regex=action_regex, temperature=1.0, max_tokens=200,
                                           seed=i))
            for i in range(16)))
        for g in gens:
            assert re.fullmatch(action_regex, g.text), g.text
            assert g.model == "untrained-tiny+random-lora"
            assert g.prompt_tokens > 0 and g.completion_tokens > 0

        # The adapter is really applied: greedy free text with the adapter differs from the base model's.
        # (The base is served by the same engine: a request without LoRARequest.)
        free = GenerationRequest(prompt=prompt, temperature=0.0, max_tokens=24)
        with_lora = await eng.generate(free)
        eng._lora_request, saved = None, eng._lora_request
        try:
            base = await eng.generate(free)
        finally:
            eng._lora_request = saved
        assert with_lora.text != base.text
        assert with_lora.completion_tokens > 0 and base.completion_tokens > 0
    finally:
        await eng.close()
