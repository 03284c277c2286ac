"""Errors as RFC 9457 problem+json: {type, title, status, detail, ...extra}. The use-cases raise
`service.problems.ApiError`; `install` maps it, and the framework's, Redis' and the engine's errors, to responses.

| status | meaning |
|---|---|
| 400 | a header is malformed (If-Match not an integer, Idempotency-Key too long) |
| 401 | no API key, or an unknown one (`WWW-Authenticate: Bearer`) |
| 403 | the key's role may not do this |
| 404 | no such session / bank / version (or it belongs to another tenant) |
| 409 | the session moved on: another step holds it or committed first, If-Match differs, the session is over, or its step budget is spent; `version` holds the current version. While another request holds the session ("Step in progress"), `retry_after` (seconds) and `Retry-After` say when its lease lapses unless renewed; "Lease lost": the request outlived its lease (a stalled replica) and was fenced off |
| 413 | request body or observation larger than the configured limit |
| 422 | the body does not validate (`errors` names each field) or an Idempotency-Key is reused with another body |
| 429 | the key's request rate limit is spent (`Retry-After` in seconds) |
| 502 | the policy kept producing unparseable output (only possible without a grammar-capable engine) |
| 503 | Redis or the engine is unavailable; nothing was written |
| 504 | the engine did not answer in time; nothing was written |
"""

from __future__ import annotations

from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from service import metrics
from service.policy.engines.base import EngineError, EngineTimeout
from service.problems import ApiError, version_conflict
from service.store.docs import VersionConflict

PROBLEM = "application/problem+json"


def problem(status: int, title: str, detail: str, headers: dict[str, str] | None = None, **extra) -> JSONResponse:
    metrics.ERRORS.labels(str(status)).inc()
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def _field(loc) -> str:
    return ".".join(str(p) for p in loc if p != "body") or "body"


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_: Request, e: ApiError):
        return problem(e.status, e.title, e.detail, headers=e.headers, **e.extra)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException):  # unknown route (404), wrong method (405), ...
        title = HTTPStatus(e.status_code).phrase if e.status_code in HTTPStatus._value2member_map_ else "Error"
        return problem(e.status_code, title, str(e.detail), headers=getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError):
        errors = [{"field": _field(err["loc"]), "message": err["msg"]} for err in e.errors()]
        detail = "; ".join(f"{x['field']}: {x['message']}" for x in errors)
        return problem(422, "Invalid request", detail, errors=errors)

    @app.exception_handler(VersionConflict)
    async def _conflict(_: Request, e: VersionConflict):  # a commit refused outside a step (end, controls, banks)
        c = version_conflict(e.current, e.why)
        return problem(c.status, c.title, c.detail, **c.extra)

    @app.exception_handler(RedisConnectionError)
    @app.exception_handler(RedisTimeoutError)
    async def _redis(_: Request, e: Exception):
        return problem(503, "Storage unavailable", f"Redis is unreachable ({type(e).__name__}); nothing was written")

    @app.exception_handler(EngineTimeout)
    async def _engine_timeout(_: Request, e: EngineTimeout):
        return problem(504, "Engine timeout", f"the model did not answer in time ({e}); nothing was written")

    @app.exception_handler(EngineError)
    async def _engine(_: Request, e: EngineError):
        return problem(503, "Engine unavailable", f"the model engine failed ({e}); nothing was written")
