"""A real `evoharness serve` child process (tiny model, eager vLLM, private redis-server) for tests that need
an HTTP URL: the client/CLI tests, the audit-page test in headless Chromium and the metrics-name check."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

from service.embedded_redis import free_port

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def live_server(model: Path, log_path: Path, timeout_s: float = 300.0, **env_overrides: str):
    """Yields the base URL once /readyz answers 200; stops the process group afterwards."""
    with live_server_process(model, log_path, timeout_s, **env_overrides) as (url, _):
        yield url


@contextmanager
def live_server_process(model: Path, log_path: Path, timeout_s: float = 300.0, **env_overrides: str):
    """live_server, yielding (base URL, the `evoharness serve` Popen): for tests that signal the process or its
    children (the vLLM engine core), or stop it themselves (stop_server)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(EVOHARNESS_MODEL=str(model), EVOHARNESS_ENFORCE_EAGER="1", EVOHARNESS_KV_CACHE_GIB="0.25",
               EVOHARNESS_MAX_MODEL_LEN="2048", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
               EVOHARNESS_AUTH="off")
    env.update(env_overrides)
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--log-level",
                                 "warning"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                assert proc.poll() is None, Path(log_path).read_text()[-3000:]
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, f"service not ready in {timeout_s} s"
                time.sleep(0.5)
            yield url, proc
        finally:
            stop_server(proc)


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (serve, its engine core, an embedded redis-server), SIGKILL after
    30 s; a group already gone is fine."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
