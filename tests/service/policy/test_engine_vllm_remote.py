"""RemoteVLLMEngine against real `python -m vllm.entrypoints.openai.api_server` processes on loopback."""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import httpx
import pytest

from service.policy.engines.base import Engine, EngineError, EngineTimeout, GenerationRequest
from service.policy.engines.factory import make_engine
from service.policy.engines.vllm_remote import RemoteVLLMEngine, rendezvous_rank

pytestmark = pytest.mark.timeout(600)


async def test_regex_constraint_load_spreading_and_failover(vllm_servers, dead_url, action_regex, prompt):
    urls = [vllm_servers[0], dead_url, *vllm_servers[1:]]
    eng = make_engine("remote", urls=urls)
    assert isinstance(eng, RemoteVLLMEngine) and isinstance(eng, Engine)
    await eng.start()
    try:
        assert eng.model_id == "tiny"  # discovered from /v1/models
        assert await eng.ready()
        reqs = [GenerationRequest(prompt=prompt, regex=action_regex, temperature=1.0, max_tokens=200, seed=i)
                for i in range(48)]
        gens = await asyncio.gather(*(eng.generate(r) for r in reqs))
        bad = [g.text for g in gens if not re.fullmatch(action_regex, g.text)]
        assert not bad, f"{len(bad)} outputs violate the regex, e.g. {bad[:3]}"
        for g in gens:
            assert g.prompt_tokens > 0 and g.completion_tokens > 0 and g.seconds > 0
            assert g.model == "tiny"
            assert g.finish_reason == "stop"
        assert len({g.text for g in gens}) > 5
        served = Counter(g.extra["server"] for g in gens)
        assert set(served) == set(vllm_servers), served  # every live server took work, the dead one none
        if len(vllm_servers) > 1:
            assert min(served.values()) >= 48 // (2 * len(vllm_servers)), served  # roughly spread
        dead = next(s for s in eng.stats() if s["url"] == dead_url)
        assert dead["failures"] >= 1  # it was tried, refused, and requests failed over
    finally:
        await eng.close()


async def test_prompt_tokens_match_the_local_tokenizer(vllm_servers, tiny_model, action_regex, prompt):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    eng = RemoteVLLMEngine(vllm_servers)
    await eng.start()
    try:
        g = await eng.generate(GenerationRequest(prompt=prompt, regex=action_regex, max_tokens=200))
        assert g.prompt_tokens == len(tok(prompt)["input_ids"])
        assert re.fullmatch(action_regex, g.text)
    finally:
        await eng.close()


async def test_round_robin_fails_over_from_a_dead_first_server(vllm_servers, dead_url, action_regex, prompt):
    eng = RemoteVLLMEngine([dead_url, vllm_servers[0]], model="tiny", policy="round_robin", cooldown_s=0.0)
    try:
        for i in range(6):
            g = await eng.generate(GenerationRequest(prompt=prompt, regex=action_regex, max_tokens=200, seed=i,
                                                     temperature=1.0))
            assert re.fullmatch(action_regex, g.text)
            assert g.extra["server"] == vllm_servers[0]
        dead = next(s for s in eng.stats() if s["url"] == dead_url)
        assert dead["failures"] >= 3  # cooldown 0: round robin keeps trying it first every other request
    finally:
        await eng.close()


async def test_all_servers_dead_is_an_engine_error(dead_url, prompt):
    eng = RemoteVLLMEngine([dead_url, dead_url + "/v1"], model="tiny")
    try:
        assert not await eng.ready()
        with pytest.raises(EngineError, match="all vLLM servers failed"):
            await eng.generate(GenerationRequest(prompt=prompt))
    finally:
        await eng.close()


async def test_bad_request_is_not_retried_and_timeout_is_engine_timeout(vllm_servers, prompt):
    eng = RemoteVLLMEngine(vllm_servers, model="tiny")
    try:
        with pytest.raises(EngineError, match="HTTP 400"):
            await eng.generate(GenerationRequest(prompt=prompt, regex="(unclosed", max_tokens=10))
        assert all(s["failures"] == 0 for s in eng.stats())
        with pytest.raises(EngineTimeout):
            await eng.generate(GenerationRequest(prompt=prompt, max_tokens=1000, timeout_s=0.001))
    finally:
        await eng.close()


async def test_server_exposes_vllm_metrics(vllm_servers):
    async with httpx.AsyncClient() as c:
        text = (await c.get(f"{vllm_servers[0]}/metrics")).text
    assert "vllm:generation_tokens_total" in text


async def test_affinity_keeps_each_key_on_one_server_and_moves_only_a_dead_servers_keys(
        vllm_servers, dead_url, action_regex, prompt):
    keys = [f"tenant/session-{i}" for i in range(12)]
    live = RemoteVLLMEngine(vllm_servers, model="tiny", policy="affinity")
    with_dead = RemoteVLLMEngine([*vllm_servers, dead_url], model="tiny", policy="affinity", cooldown_s=60.0)
    try:
        async def home(eng, key):
            servers = set()
            for i in range(3):   # three steps of one session, some of them concurrent with other sessions
                g = await eng.generate(GenerationRequest(prompt=prompt, regex=action_regex, max_tokens=200,
                                                         seed=i, affinity_key=key))
                servers.add(g.extra["server"])
            assert len(servers) == 1, f"{key} was served by {servers}"
            return servers.pop()

        homes = dict(zip(keys, await asyncio.gather(*(home(live, k) for k in keys))))
        if len(vllm_servers) > 1:
            assert len(set(homes.values())) > 1, homes   # the keys spread over the servers
        moved = dict(zip(keys, await asyncio.gather(*(home(with_dead, k) for k in keys))))
        # adding a (dead) server moves no key between the live ones: a key whose home is the dead server fails over,
        # the others keep their server
        assert all(moved[k] == homes[k] for k in keys), (homes, moved)
        urls, dead_base = [s["url"] for s in with_dead.stats()], RemoteVLLMEngine._base(dead_url)
        ranked_dead_first = [k for k in keys if min(urls, key=lambda u: rendezvous_rank(k, u)) == dead_base]
        dead = next(s for s in with_dead.stats() if s["url"] == dead_base)
        assert (dead["failures"] >= 1) == bool(ranked_dead_first), (dead, ranked_dead_first)
    finally:
        await live.close()
        await with_dead.close()
