"""The service with the zero-cost ScriptedEngine (always `look`), as a uvicorn factory, plus a bare FastAPI + Redis
echo app: the two sides of the service-overhead benchmark, and the app the multi-worker metrics test runs.

    REDIS_URL=redis://127.0.0.1:6379/0 uvicorn --factory bench.service_scripted_app:service_app --workers 2
    REDIS_URL=redis://127.0.0.1:6379/0 uvicorn --factory bench.service_scripted_app:echo_app

NOT a way to serve a policy: the scripted engine ignores the prompt.
"""

from __future__ import annotations

import json
import os
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request

RESPONSE = "<think>scripted</think><action>look</action>"


def service_app():
    from service.api.app import create_app
    from service.policy.engines.scripted import ScriptedEngine
    from service.settings import Settings

    return create_app(Settings(engine="scripted"), engine=ScriptedEngine([RESPONSE], model_id="scripted"))


def echo_app():
    """The floor: parse the same JSON body, one Redis round trip (SET + GET of the body), return JSON."""
    from redis.asyncio import Redis

    @asynccontextmanager
    async def lifespan(app):
        app.state.r = Redis.from_url(os.environ["REDIS_URL"])
        yield
        await app.state.r.aclose()

    app = FastAPI(lifespan=lifespan)

    @app.post("/echo/{sid}")
    async def echo(sid: str, request: Request):
        body = await request.json()
        raw = json.dumps(body)
        await app.state.r.set(f"echo:{sid}", raw, ex=600)
        got = await app.state.r.get(f"echo:{sid}")
        return {"action": "look", "bytes": len(got)}

    return app
