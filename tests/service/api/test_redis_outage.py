"""Redis goes away mid-run: 503 while down, nothing half-written, sessions intact after (AOF on). Redis hangs
(stops answering, connections open): 503 once the command timeouts and retries are spent, nothing written."""

import asyncio
import os
import signal
import time

from service.api import app as app_module
from service.api.app import create_app
from service.embedded_redis import EmbeddedRedis
from service.policy.engines.scripted import ScriptedEngine
from tests.support import Client, make_settings

ADM = ["go to desk 1", "look"]


async def test_redis_restart_gives_503_then_recovers(vllm_engine, tmp_path):
    redis = EmbeddedRedis(appendonly=True, dir=str(tmp_path)).start()
    try:
        app = create_app(make_settings(redis.url), engine=vllm_engine)
        async with Client(app) as c:
            sid = (await c.post("/v1/sessions", json={"task": "t"})).json()["session_id"]
            ok = await c.post(f"/v1/sessions/{sid}/step", json={"observation": "o1", "admissible_actions": ADM})
            assert ok.status_code == 200
            before = (await c.get(f"/v1/sessions/{sid}/state")).json()

            redis.stop()
            r = await c.post(f"/v1/sessions/{sid}/step", json={"observation": "o2", "admissible_actions": ADM})
            assert r.status_code == 503 and r.headers["content-type"] == "application/problem+json"
            assert "nothing was written" in r.json()["detail"]
            assert (await c.get("/readyz")).status_code == 503
            assert (await c.get("/healthz")).status_code == 200
            scrape = await c.get("/metrics")     # not rate-limited (the limiter lives in Redis): Prometheus keeps
            assert scrape.status_code == 200     # scraping and sees the outage's 503s while it lasts
            assert 'evoharness_http_errors_total{status="503"}' in scrape.text

            redis.start()
            assert (await c.get("/readyz")).status_code == 200
            after = (await c.get(f"/v1/sessions/{sid}/state")).json()
            assert after == before
            r = await c.post(f"/v1/sessions/{sid}/step", json={"observation": "o2", "admissible_actions": ADM})
            assert r.status_code == 200 and r.json()["version"] > before["version"]
    finally:
        redis.stop()


async def test_redis_that_stops_answering_gives_503_in_time(monkeypatch):
    """SIGSTOP: Redis keeps its connections (and accepts new ones) but reads and answers nothing. Each command
    attempt times out after REDIS_SOCKET_TIMEOUT_S (short here), and after the retries the step answers 503. Only
    the storage path matters here, so a ScriptedEngine stands in for the model."""
    monkeypatch.setattr(app_module, "REDIS_SOCKET_TIMEOUT_S", 0.3)
    monkeypatch.setattr(app_module, "REDIS_CONNECT_TIMEOUT_S", 0.3)
    redis = EmbeddedRedis().start()
    step = {"observation": "o1", "admissible_actions": ADM}
    try:
        # a short lease: the hung step's begin (and its retries) reach Redis once it runs again, and take the lease
        settings = make_settings(redis.url, engine="scripted", step_timeout_s=0.5, step_lease_ms=1000)
        app = create_app(settings, engine=ScriptedEngine(["<think>t</think><action>look</action>"]))
        async with Client(app) as c:
            sid = (await c.post("/v1/sessions", json={"task": "t"})).json()["session_id"]
            assert (await c.post(f"/v1/sessions/{sid}/step", json=step)).status_code == 200
            before = (await c.get(f"/v1/sessions/{sid}/state")).json()

            os.kill(redis.proc.pid, signal.SIGSTOP)
            t = time.monotonic()
            r = await c.post(f"/v1/sessions/{sid}/step", json=step)
            took = time.monotonic() - t
            assert r.status_code == 503 and r.headers["content-type"] == "application/problem+json", r.text
            assert "TimeoutError" in r.json()["detail"] and "nothing was written" in r.json()["detail"]
            assert took < 10, took              # 4 attempts of (0.3 s command + 0.3 s reconnect) and backoff

            os.kill(redis.proc.pid, signal.SIGCONT)
            assert (await c.get(f"/v1/sessions/{sid}/state")).json() == before
            await asyncio.sleep(1.1)                              # the orphaned lease expires
            r = await c.post(f"/v1/sessions/{sid}/step", json=step)
            assert r.status_code == 200 and r.json()["version"] == before["version"] + 2, r.text
    finally:
        os.kill(redis.proc.pid, signal.SIGCONT)
        redis.stop()


async def test_metrics_do_not_wait_on_a_hung_redis():
    """/metrics reads the active-sessions count from Redis, but within ACTIVE_COUNT_BUDGET_S: with Redis hung
    (SIGSTOP; a command would wait REDIS_SOCKET_TIMEOUT_S = 5 s per attempt, four attempts) a scraper with a short
    timeout still gets its scrape, and the gauge keeps its last value."""
    from service.api.routes import health

    redis = EmbeddedRedis().start()
    try:
        settings = make_settings(redis.url, engine="scripted")
        app = create_app(settings, engine=ScriptedEngine(["<think>t</think><action>look</action>"]))
        async with Client(app) as c:
            for _ in range(2):
                assert (await c.post("/v1/sessions", json={"task": "t"})).status_code == 201
            assert "evoharness_active_sessions 2.0" in (await c.get("/metrics")).text

            os.kill(redis.proc.pid, signal.SIGSTOP)
            t = time.monotonic()
            scrape = await c.get("/metrics")
            took = time.monotonic() - t
            assert scrape.status_code == 200
            assert "evoharness_active_sessions 2.0" in scrape.text
            assert took < app_module.REDIS_SOCKET_TIMEOUT_S / 2, (took, health.ACTIVE_COUNT_BUDGET_S)
    finally:
        os.kill(redis.proc.pid, signal.SIGCONT)
        redis.stop()
