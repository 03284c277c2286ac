"""Several uvicorn workers sharing one Redis: sessions move freely between workers, and with
PROMETHEUS_MULTIPROC_DIR any worker's /metrics reports the sum over all of them. Uses the scripted-engine app
(bench/service_scripted_app.py): what is tested here is the process model, not generation."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from service.embedded_redis import EmbeddedRedis, free_port

ROOT = Path(__file__).resolve().parents[2]


def metric(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_two_workers_share_redis_and_metrics(tmp_path):
    prom = tmp_path / "prom"
    prom.mkdir()
    port = free_port()
    with EmbeddedRedis() as redis:
        env = {**os.environ, "REDIS_URL": redis.url, "PROMETHEUS_MULTIPROC_DIR": str(prom), "OMP_NUM_THREADS": "1",
               "EVOHARNESS_AUTH": "off"}
        proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "bench.service_scripted_app:service_app",
                                 "--workers", "2", "--port", str(port), "--log-level", "warning"], cwd=ROOT, env=env,
                                start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.3)
            sids, n = [], 0
            for _ in range(4):   # a fresh connection per call, so the kernel spreads calls over both workers
                r = httpx.post(f"{url}/v1/sessions", json={"task": "look around", "harness_cap": 0})
                sids.append(r.json()["session_id"])
            for i in range(6):
                for sid in sids:
                    r = httpx.post(f"{url}/v1/sessions/{sid}/step",
                                   json={"observation": f"room {i}", "admissible_actions": ["look", "wait"]},
                                   headers={"Connection": "close"})
                    assert r.status_code == 200, r.text
                    n += 1
            assert httpx.post(f"{url}/v1/sessions/{sids[0]}/end", json={"won": False}).status_code == 200
            pids = {p.name.split("_")[-1] for p in prom.glob("counter_*.db")}
            assert len(pids) == 2, "both workers served requests"
            for _ in range(4):                     # whichever worker answers, the totals are the same
                text = httpx.get(f"{url}/metrics", headers={"Connection": "close"}).text
                assert metric(text, "evoharness_steps_total", '{outcome="ok"}') == n
                assert metric(text, "evoharness_step_seconds_count", '{part="total"}') == n
                assert metric(text, "evoharness_active_sessions") == 3
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
