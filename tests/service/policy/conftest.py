"""Fixtures for the engine tests: a tiny UNTRAINED model built locally, and a vLLM server subprocess.

Everything here is real: the model is a random-init Qwen3 saved by service.policy.bootstrap_model, the
in-process engine is vLLM's AsyncLLM, the remote engine talks to `python -m vllm.entrypoints.openai.api_server`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from service.embedded_redis import free_port

# Fast, reliable start on a small CPU box (measured; docs/engines.md). Set before vLLM/torch are imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The regex of the task brief: a think block and one of three actions (one with a free argument).
ACTION_REGEX = (
    r"<think>[a-z ]{0,40}</think><action>(go to desk 1|open drawer 2|track \[[a-z ]{1,20}\])</action>"
)
PROMPT = (
    "<|im_start|>system\nYou are a household agent. Answer <think>...</think><action>...</action>.<|im_end|>\n"
    "<|im_start|>user\nYou are in the middle of a room. Looking quickly around you, you see a desk 1, "
    "a drawer 2, a bed 1.\nYour task is to: put a pen in drawer.\nAdmissible actions: go to desk 1, "
    "open drawer 2<|im_end|>\n<|im_start|>assistant\n"
)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from service.policy.bootstrap_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "untrained-tiny", seed=0)


def _start_server(model: Path, port: int, log_path: Path, extra: list[str] | None = None) -> subprocess.Popen:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        VLLM_USE_AOT_COMPILE="0",
        # Server mode: keep the default multiprocess layout (front end + engine core).
        VLLM_ENABLE_V1_MULTIPROCESSING="1",
        VLLM_CPU_KVCACHE_SPACE="1",
    )
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--served-model-name", "tiny",
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "2048", "--enforce-eager", "--max-num-seqs", "32",
        # vllm-cpu 0.32: seeded requests + chunked prefill crash the engine core (docs/engines.md).
        "--no-enable-chunked-prefill", "--max-num-batched-tokens", "2048",
        "--uvicorn-log-level", "warning",
        *(extra or []),
    ]
    return subprocess.Popen(cmd, env=env, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _wait_ready(procs: list[tuple[subprocess.Popen, str, Path]], timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    pending = list(procs)
    while pending:
        for item in list(pending):
            proc, url, log = item
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM server {url} exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    pending.remove(item)
            except httpx.HTTPError:
                pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"vLLM servers not ready in {timeout} s: {[u for _, u, _ in pending]}")
        time.sleep(0.5)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="session")
def vllm_servers(tiny_model, tmp_path_factory):
    """Real vLLM OpenAI servers on loopback; yields their base URLs (count: EVOHARNESS_TEST_SERVERS, default 2)."""
    n = int(os.environ.get("EVOHARNESS_TEST_SERVERS", "2"))
    logs = tmp_path_factory.mktemp("vllm-server-logs")
    started = []
    try:
        for i in range(n):
            port = free_port()
            log = logs / f"server{i}.log"
            started.append((_start_server(tiny_model, port, log), f"http://127.0.0.1:{port}", log))
        t0 = time.monotonic()
        _wait_ready(started)
        print(f"\n{n} vLLM server(s) ready in {time.monotonic() - t0:.1f} s")
        yield [url for _, url, _ in started]
    finally:
        for proc, _, _ in started:
            _stop(proc)


@pytest.fixture(scope="session")
def action_regex() -> str:
    return ACTION_REGEX


@pytest.fixture(scope="session")
def prompt() -> str:
    return PROMPT


@pytest.fixture
def dead_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    return f"http://127.0.0.1:{free_port()}"
