"""ScriptedEngine (test double for single-module unit tests; never used to verify a feature) and the factory."""

from __future__ import annotations

import pytest

from service.policy.engines.base import Engine, EngineError, GenerationRequest
from service.policy.engines.factory import make_engine
from service.policy.engines.scripted import ScriptedEngine


async def test_scripted_replays_in_order_and_cycles():
    eng = make_engine("scripted", responses=["a b", "c"])
    assert isinstance(eng, ScriptedEngine) and isinstance(eng, Engine)
    await eng.start()
    assert await eng.ready()
    texts = [(await eng.generate(GenerationRequest(prompt="p q r"))).text for _ in range(3)]
    assert texts == ["a b", "c", "a b"]
    g = await eng.generate(GenerationRequest(prompt="p q r"))
    assert g.prompt_tokens == 3 and g.completion_tokens == 1 and g.model == "scripted"
    assert len(eng.requests) == 4


async def test_scripted_no_cycle_runs_out_and_responder():
    eng = ScriptedEngine(["x"], cycle=False)
    await eng.generate(GenerationRequest(prompt="p"))
    with pytest.raises(EngineError):
        await eng.generate(GenerationRequest(prompt="p"))
    eng2 = ScriptedEngine(responder=lambda r: r.prompt.upper())
    assert (await eng2.generate(GenerationRequest(prompt="hi"))).text == "HI"


def test_factory_kinds_and_errors(tmp_path):
    from service.policy.engines.vllm_local import VLLMEngine
    from service.policy.engines.vllm_remote import RemoteVLLMEngine

    v = make_engine("vllm", model=str(tmp_path), adapter=None, kv_cache_gib=0.5)
    assert isinstance(v, VLLMEngine) and v.model_id == tmp_path.name and v.kv_cache_gib == 0.5
    r = make_engine("remote", urls="http://a:1,http://b:2/v1", model="m", adapter="lora1")
    assert isinstance(r, RemoteVLLMEngine)
    assert [s.url for s in r.servers] == ["http://a:1", "http://b:2"]
    assert r.model_id == "m+lora1"
    with pytest.raises(ValueError):
        make_engine("nope")
    with pytest.raises(ValueError):
        make_engine("vllm")
    with pytest.raises(ValueError):
        make_engine("remote")
