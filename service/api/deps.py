"""Annotated dependency aliases used by the routes.

Every dependency is `async def`: FastAPI runs a plain `def` dependency in a worker thread, a thread hop per
dependency per request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from service.auth import DEV_KEY, PERMISSIONS, ROLES, ApiKey
from service.banks import BankService
from service.problems import ApiError, rate_limited
from service.rate_limit import RateLimiter
from service.sessions import SessionService


@dataclass(frozen=True)
class Principal:
    """Who is calling: the API key's tenant, id and role (dev mode: admin of tenant `default`, key id `dev`)."""

    tenant: str = "default"
    key_id: str | None = None
    role: str = "admin"


async def _sessions(request: Request) -> SessionService:
    return request.app.state.sessions


async def _banks(request: Request) -> BankService:
    return request.app.state.banks


_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")
_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="the API key (alternative header)")


def _unauthorized(detail: str) -> ApiError:
    return ApiError(401, "Unauthorized", detail, headers={"WWW-Authenticate": "Bearer"})


def _authenticate(request: Request, bearer: HTTPAuthorizationCredentials | None, header_key: str | None) -> ApiKey:
    """The caller's key (401 without one or with an unknown one); dev mode: DEV_KEY."""
    ring = request.app.state.keyring
    if ring is None:
        return DEV_KEY
    secret = bearer.credentials if bearer is not None else header_key
    if not secret:
        raise _unauthorized("an API key is required: Authorization: Bearer <key> (or X-API-Key)")
    key = ring.lookup(secret)
    if key is None:
        raise _unauthorized("unknown API key")
    return key


def _authorize(key: ApiKey, permission: str) -> Principal:
    if not key_may(key.role, permission):
        raise ApiError(403, "Forbidden", f"role {key.role!r} may not {PERMISSIONS[permission]}")
    return Principal(tenant=key.tenant, key_id=key.id, role=key.role)


async def _counted(request: Request, key: ApiKey) -> ApiKey:
    """Count the request against the key's rate limit in Redis (429 over it)."""
    limiter: RateLimiter | None = request.app.state.rate_limiter
    if limiter is not None:
        verdict = await limiter.hit(key.id)
        if not verdict.allowed:
            raise rate_limited(key.id, verdict, limiter.window_s)
    return key


def needs(permission: str):
    """A dependency type: the caller, who must hold `permission` (service.auth.ROLES), else 403.
    Order: 401, 429 (the request counted), 403, then the body's 422."""

    # one dependency (authenticate, rate limit, then the role check) rather than a chain of them: FastAPI's
    # per-dependency overhead is paid on every request
    async def check(request: Request,
                    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
                    header_key: Annotated[str | None, Depends(_api_key_header)]) -> Principal:
        return _authorize(await _counted(request, _authenticate(request, bearer, header_key)), permission)

    check.__name__ = f"needs_{permission.replace('.', '_')}"
    return Annotated[Principal, Depends(check)]


class _Uncounted(HTTPBearer):
    """The caller, authenticated (401) and authorized (403), NOT counted against the rate limit: for the step
    route, which counts the request in the Redis call that takes the session's lease (SessionService.step).

    One dependency without sub-dependencies (it reads both key headers itself, through the same scheme objects),
    so FastAPI runs two dependency-solving passes per request instead of four. It is an HTTPBearer so that
    OpenAPI documents the route's security as before; the route adds the APIKeyHeader alternative
    (UNCOUNTED_OPENAPI)."""

    def __init__(self, permission: str):
        super().__init__(auto_error=False, scheme_name=_bearer.scheme_name, description=_bearer.model.description)
        self.permission = permission

    async def __call__(self, request: Request) -> Principal:  # type: ignore[override]
        key = _authenticate(request, await _bearer(request), await _api_key_header(request))
        return _authorize(key, self.permission)


STEP_AUTH = _Uncounted("session.step")  # the step route's dependency; its fast path (routes/fast_step.py) calls it


# the second security alternative of a route on an _Uncounted dependency, as FastAPI writes it for `needs` routes
UNCOUNTED_OPENAPI = {"security": [{_api_key_header.scheme_name: []}]}


def key_may(role: str, permission: str) -> bool:
    return permission in ROLES.get(role, ())


SessionsDep = Annotated[SessionService, Depends(_sessions)]
BanksDep = Annotated[BankService, Depends(_banks)]
CanCreate = needs("session.create")
CanStepUncounted = Annotated[Principal, Depends(STEP_AUTH)]
CanEnd = needs("session.end")
CanDelete = needs("session.delete")
CanReadState = needs("session.state")
CanAudit = needs("session.audit")
CanControlSession = needs("session.control")
CanReadBank = needs("bank.read")
CanConsolidate = needs("bank.consolidate")
CanControlBank = needs("bank.control")
# /metrics is not counted against the rate limit: the limiter lives in Redis, and Prometheus must keep scraping
# (and see the 503s) while Redis is down
CanReadMetricsUncounted = Annotated[Principal, Depends(_Uncounted("metrics"))]
