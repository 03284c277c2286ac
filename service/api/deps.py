"""Annotated dependency aliases used by the routes.

Every dependency is `async def`: FastAPI runs a plain `def` dependency in a worker thread, a thread hop per
dependency per request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from service.api.errors import ApiError
from service.auth import DEV_KEY, PERMISSIONS, ROLES, ApiKey
from service.rate_limit import RateLimiter

from service.banks import BankService
from service.sessions import SessionService
from service.settings import Settings


@dataclass(frozen=True)
class Principal:
    """Who is calling: the API key's tenant, id and role (dev mode: admin of tenant `default`, key id `dev`)."""

    tenant: str = "default"
    key_id: str | None = None
    role: str = "admin"


async def _settings(request: Request) -> Settings:
    return request.app.state.settings


async def _sessions(request: Request) -> SessionService:
    return request.app.state.sessions


async def _banks(request: Request) -> BankService:
    return request.app.state.banks


_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")
_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="the API key (alternative header)")


def _unauthorized(detail: str) -> ApiError:
    return ApiError(401, "Unauthorized", detail, headers={"WWW-Authenticate": "Bearer"})


async def _principal(request: Request,
                     bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
                     header_key: Annotated[str | None, Depends(_api_key_header)]) -> Principal:
    """Authenticate (401), then count the request against the key's rate limit in Redis (429)."""
    ring = request.app.state.keyring
    if ring is None:
        key: ApiKey = DEV_KEY
    else:
        secret = bearer.credentials if bearer is not None else header_key
        if not secret:
            raise _unauthorized("an API key is required: Authorization: Bearer <key> (or X-API-Key)")
        key = ring.lookup(secret)
        if key is None:
            raise _unauthorized("unknown API key")
    settings: Settings = request.app.state.settings
    if settings.rate_limit > 0:
        limiter = getattr(request.app.state, "rate_limiter", None)
        if limiter is None:
            limiter = request.app.state.rate_limiter = RateLimiter(
                request.app.state.sessions.docs.r, settings.namespace, settings.rate_limit, settings.rate_window_s)
        verdict = await limiter.hit(key.id)
        if not verdict.allowed:
            raise ApiError(429, "Too many requests",
                           f"key {key.id!r} made over {verdict.limit} requests in {settings.rate_window_s:g} s; "
                           f"retry in {verdict.retry_after_s} s",
                           headers={"Retry-After": str(verdict.retry_after_s)}, retry_after=verdict.retry_after_s)
    return Principal(tenant=key.tenant, key_id=key.id, role=key.role)


def needs(permission: str):
    """A dependency type: the caller, who must hold `permission` (service.auth.ROLES), else 403."""

    # one dependency (authenticate, rate limit, then the role check) rather than a check depending on
    # _principal: FastAPI's per-dependency overhead is paid on every request
    async def check(request: Request,
                    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
                    header_key: Annotated[str | None, Depends(_api_key_header)]) -> Principal:
        who = await _principal(request, bearer, header_key)
        if not key_may(who.role, permission):
            raise ApiError(403, "Forbidden", f"role {who.role!r} may not {PERMISSIONS[permission]}")
        return who

    check.__name__ = f"needs_{permission.replace('.', '_')}"
    return Annotated[Principal, Depends(check)]


def key_may(role: str, permission: str) -> bool:
    return permission in ROLES.get(role, ())


SettingsDep = Annotated[Settings, Depends(_settings)]
SessionsDep = Annotated[SessionService, Depends(_sessions)]
BanksDep = Annotated[BankService, Depends(_banks)]
PrincipalDep = Annotated[Principal, Depends(_principal)]
CanCreate = needs("session.create")
CanStep = needs("session.step")
CanEnd = needs("session.end")
CanDelete = needs("session.delete")
CanReadState = needs("session.state")
CanAudit = needs("session.audit")
CanControlSession = needs("session.control")
CanReadBank = needs("bank.read")
CanConsolidate = needs("bank.consolidate")
CanControlBank = needs("bank.control")
CanReadMetrics = needs("metrics")
