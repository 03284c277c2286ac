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
