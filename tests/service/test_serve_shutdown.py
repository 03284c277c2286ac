"""`evoharness serve` never leaves its private redis-server behind: SIGTERM, SIGINT, SIGKILL, a crash at startup.

Real processes: `python -m service.cli serve` without REDIS_URL, and the redis-server it starts. The engine is
`remote` with a model name given, so it starts without loading or contacting a model (the process lifetime under
test is cli.serve around uvicorn.run, the same for every engine) and /healthz answers once uvicorn serves.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from service.embedded_redis import EmbeddedRedis, free_port

ROOT = Path(__file__).resolve().parents[2]
GONE_WITHIN_S = 5.0


def serve(tmp_path: Path, **env_overrides: str) -> tuple[subprocess.Popen, Path, int]:
    """Starts `evoharness serve` in its own process group; returns the process, its log and its port."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(EVOHARNESS_ENGINE="remote", EVOHARNESS_REMOTE_URLS=f'["http://127.0.0.1:{free_port()}"]',
               EVOHARNESS_MODEL="untrained-tiny", EVOHARNESS_AUTH="off", PYTHONUNBUFFERED="1")
    env.update(env_overrides)
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--log-level",
                                 "warning"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, log, port


def wait_serving(proc: subprocess.Popen, log: Path, port: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"serve did not answer in {timeout_s} s: {log.read_text()[-3000:]}"
        time.sleep(0.2)


def redis_port(log: Path) -> int:
    found = re.search(r"started a private redis-server at redis://127\.0\.0\.1:(\d+)/", log.read_text())
    assert found, log.read_text()[-3000:]
    return int(found.group(1))


def redis_servers(port: int) -> list[psutil.Process]:
    """Live (not zombie) redis-server processes listening on port, whoever their parent is now."""
    found = []
    for p in psutil.process_iter(["name"]):
        try:
            if p.info["name"] == "redis-server" and p.status() != psutil.STATUS_ZOMBIE and any(
                    c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in p.net_connections("tcp")):
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return found


def wait_gone(port: int, within_s: float = GONE_WITHIN_S) -> list[psutil.Process]:
    """Polls until no redis-server serves port; returns those still there after within_s."""
    deadline = time.monotonic() + within_s
    while (left := redis_servers(port)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def cleanup(proc: subprocess.Popen) -> None:
    """Whatever a failed test left in the process group (serve, or an orphaned redis-server) goes."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
def test_the_embedded_redis_stops_with_serve(tmp_path, sig):
    proc, log, port = serve(tmp_path)
    try:
        wait_serving(proc, log, port)
        port_r = redis_port(log)
        children = [p for p in psutil.Process(proc.pid).children() if p.name() == "redis-server"]
        assert [p.pid for p in children] == [p.pid for p in redis_servers(port_r)] != []

        os.kill(proc.pid, sig)  # serve alone, not its process group
        proc.wait(60)
        assert wait_gone(port_r) == [], f"redis-server outlived serve ({sig.name}): {log.read_text()[-2000:]}"
    finally:
        cleanup(proc)


def test_the_embedded_redis_stops_when_serve_fails_to_start(tmp_path):
    """engine=remote without URLs: the app's startup raises after the redis-server started, serve exits non-zero."""
    proc, log, _ = serve(tmp_path, EVOHARNESS_REMOTE_URLS="[]")
    try:
        assert proc.wait(120) != 0
        assert "needs urls" in log.read_text()
        assert wait_gone(redis_port(log)) == [], log.read_text()[-2000:]
    finally:
        cleanup(proc)


def test_a_redis_started_from_a_worker_thread_outlives_the_thread():
    """PR_SET_PDEATHSIG fires when the forking *thread* ends: a worker thread's child must not get it."""
    started = []
    worker = threading.Thread(target=lambda: started.append(EmbeddedRedis().start()))
    worker.start()
    worker.join()
    redis = started[0]
    try:
        left = wait_gone(redis.port, within_s=1.0)  # a signalled redis-server would be gone at once
        assert [p.pid for p in left] == [redis.proc.pid] and redis.proc.poll() is None
    finally:
        redis.stop()
