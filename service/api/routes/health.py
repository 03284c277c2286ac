"""/healthz (process up), /readyz (Redis and engine), /metrics (Prometheus)."""

from __future__ import annotations

import asyncio
import os

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from service import metrics
from service.api.deps import UNCOUNTED_OPENAPI, CanReadMetricsUncounted, SessionsDep
from service.api.errors import problem

router = APIRouter(tags=["health"])

# /metrics refreshes the active-sessions gauge from Redis, but never waits longer than this for it: with Redis down
# or restarting, the client's retries and connect timeout could otherwise outlast a scraper's timeout (Prometheus
# defaults to 10 s; the e2e test scrapes with 1 s) and the scrape would fail. On a miss the gauge keeps its last value.
ACTIVE_COUNT_BUDGET_S = 0.25


@router.get("/healthz")
async def healthz():
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request, sessions: SessionsDep):
    checks = {}
    try:
        checks["redis"] = await sessions.docs.ping()
    except Exception as e:  # noqa: BLE001 - any failure means not ready
        checks["redis"] = False
        checks["redis_error"] = type(e).__name__
    try:
        checks["engine"] = bool(await sessions.engine.ready())
    except Exception as e:  # noqa: BLE001
        checks["engine"] = False
        checks["engine_error"] = type(e).__name__
    if checks["redis"] and checks["engine"]:
        return {"status": "ready", "model": sessions.engine.model_id, **checks}
    return problem(503, "Not ready", f"checks: {checks}", checks=checks)


@router.get("/metrics", openapi_extra=UNCOUNTED_OPENAPI)
async def prometheus_metrics(request: Request, sessions: SessionsDep, _: CanReadMetricsUncounted):
    try:
        metrics.ACTIVE_SESSIONS.set(await asyncio.wait_for(sessions.active_count(), ACTIVE_COUNT_BUDGET_S))
    except Exception:  # noqa: BLE001 - metrics must render even with Redis down or slow (TimeoutError)
        pass
    registry = getattr(request.app.state, "registry", None) or _multiprocess_registry() or REGISTRY
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def _multiprocess_registry():
    """Several uvicorn workers: with PROMETHEUS_MULTIPROC_DIR set, every worker writes its samples there and any
    worker's /metrics renders the sum over all of them (docs/operations.md)."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    from prometheus_client import CollectorRegistry, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry
