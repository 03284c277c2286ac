"""Redis goes away mid-run: 503 while down, nothing half-written, sessions intact after (AOF on)."""

from service.api.app import create_app
from service.embedded_redis import EmbeddedRedis
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

            redis.start()
            assert (await c.get("/readyz")).status_code == 200
            after = (await c.get(f"/v1/sessions/{sid}/state")).json()
            assert after == before
            r = await c.post(f"/v1/sessions/{sid}/step", json={"observation": "o2", "admissible_actions": ADM})
            assert r.status_code == 200 and r.json()["version"] > before["version"]
    finally:
        redis.stop()
