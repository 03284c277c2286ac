"""Python client for the EvoHarness HTTP API (sync and async, over httpx).

    from service.client import EvoHarnessClient

    with EvoHarnessClient("http://127.0.0.1:8000") as evo:
        sid = evo.create_session("put a clean apple in fridge", domain="alfworld").session_id
        step = evo.step(sid, "You are in the middle of a room...", ["go to fridge 1", "look"])
        print(step.action, step.usage.harness_calls)
        evo.end(sid, won=True)

Retries: connection errors, 503 and 504 are retried with exponential backoff. A step always carries an
``Idempotency-Key`` (generated once per call unless given) and every retry of that step REUSES it, so a step
whose response was lost is answered from the service's stored response instead of running twice.

429 (rate limited) is retried too, after the service's Retry-After. So is 409 "Lease lost": the request outlived
its lease (its replica stalled, e.g. on an overloaded host), the service fenced its write off and wrote nothing, so
the retry (the same Idempotency-Key for a step) runs it afresh. Other 409s are raised: the session moved on.

Errors are raised as :class:`ApiError` subclasses carrying the problem+json body: :class:`Unauthorized` (401),
:class:`Forbidden` (403), :class:`RateLimited` (429), :class:`NotFound` (404),
:class:`Conflict` (409, ``.version`` = the session's current version), :class:`PayloadTooLarge` (413),
:class:`Unavailable` (503/504, after the retries).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["EvoHarnessClient", "AsyncEvoHarnessClient", "ApiError", "BadRequest", "NotFound", "Conflict",
           "PayloadTooLarge", "Unprocessable", "Unavailable", "Unauthorized", "Forbidden", "RateLimited", "Created",
           "Step", "Turn", "Usage", "RetryPolicy"]

RETRY_STATUS = frozenset({429, 503, 504})   # none of them wrote anything
LEASE_LOST = "Lease lost"                   # the 409 whose write was fenced off: nothing written either


# ---- errors -------------------------------------------------------------------------------------------
class ApiError(Exception):
    """An error response. ``problem`` is the application/problem+json body (or a stand-in for a non-JSON body)."""

    def __init__(self, status: int, problem: dict[str, Any], method: str = "", url: str = ""):
        self.status = status
        self.problem = problem
        self.title = problem.get("title", "")
        self.detail = problem.get("detail", "")
        self.errors: list[dict] = problem.get("errors") or []
        self.method, self.url = method, url
        super().__init__(f"{status} {self.title}: {self.detail} ({method} {url})".strip())


class BadRequest(ApiError):
    """400: a malformed header (If-Match, Idempotency-Key)."""


class Unauthorized(ApiError):
    """401: no API key, or an unknown / revoked one."""


class Forbidden(ApiError):
    """403: the API key lacks the role this call needs."""


class RateLimited(ApiError):
    """429: over the key's rate limit (after the retries); ``retry_after`` seconds as the service said."""

    @property
    def retry_after(self) -> float | None:
        v = self.problem.get("retry_after")
        return float(v) if v is not None else None


class NotFound(ApiError):
    """404: unknown session, bank, entry or version."""


class Conflict(ApiError):
    """409: the session moved on. ``version`` is its current version (None if the service did not say)."""

    @property
    def version(self) -> int | None:
        v = self.problem.get("version")
        return int(v) if v is not None else None


class PayloadTooLarge(ApiError):
    """413: request body or observation over the service's limit."""


class Unprocessable(ApiError):
    """422: validation failed (see ``errors``) or an Idempotency-Key was reused with another body."""


class Unavailable(ApiError):
    """503 (Redis or engine down) or 504 (engine timeout), still failing after the retries; nothing was written."""


_BY_STATUS = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 429: RateLimited, 404: NotFound, 409: Conflict,
              413: PayloadTooLarge, 422: Unprocessable, 503: Unavailable, 504: Unavailable}


def error_for(resp: httpx.Response) -> ApiError:
    try:
        body = resp.json()
        if not isinstance(body, dict):
            raise ValueError
    except ValueError:
        body = {"type": "about:blank", "title": resp.reason_phrase, "status": resp.status_code,
                "detail": resp.text[:500]}
    cls = _BY_STATUS.get(resp.status_code, ApiError)
    return cls(resp.status_code, body, resp.request.method, str(resp.request.url))


# ---- typed results --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    harness_calls: int = 0
    model_seconds: float = 0.0
    total_seconds: float = 0.0

    @classmethod
    def of(cls, d: dict | None) -> Usage:
        d = d or {}
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if d.get(k) is not None})


@dataclass(frozen=True)
class Turn:
    kind: str
    verb: str | None = None
    arg: str | None = None
    reason: str | None = None
    result: Any = None


@dataclass(frozen=True)
class Step:
    action: str | None
    turns: list[Turn]
    version: int
    usage: Usage
    raw: dict = field(repr=False, default_factory=dict)

    @classmethod
    def of(cls, d: dict) -> Step:
        turns = [Turn(**{k: t.get(k) for k in Turn.__dataclass_fields__}) for t in d.get("turns", [])]
        return cls(d.get("action"), turns, int(d["version"]), Usage.of(d.get("usage")), d)


@dataclass(frozen=True)
class Created:
    session_id: str
    version: int


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all; sleeps ``backoff_s * 2**i`` (+ up to 25 % jitter), capped at ``max_backoff_s``."""

    attempts: int = 4
    backoff_s: float = 0.2
    max_backoff_s: float = 5.0

    def delay(self, i: int) -> float:
        d = min(self.max_backoff_s, self.backoff_s * (2 ** i))
        return d * (1 + random.random() / 4)


# ---- request building (shared by both clients) ------------------------------------------------------------
def _session_body(task, domain, mode, bank, metadata, modules, max_steps, harness_cap) -> dict:
    body = {"task": task, "domain": domain, "mode": mode, "bank": bank, "metadata": metadata or {}}
    for k, v in (("modules", modules), ("max_steps", max_steps), ("harness_cap", harness_cap)):
        if v is not None:
            body[k] = v
    return body


def _step_request(observation, admissible_actions, won, done, idempotency_key, if_match) -> tuple[dict, dict]:
    body = {"observation": observation, "admissible_actions": admissible_actions, "won": won, "done": done}
    headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
    if if_match is not None:
        headers["If-Match"] = str(if_match)
    return body, headers


def _headers(api_key: str | None, extra: dict | None) -> dict:
    h = {"Accept": "application/json", "User-Agent": "evoharness-client"}
    if api_key:
        h["Authorization"] = f"Bearer {api_key}"
    h.update(extra or {})
    return h


def _retryable(resp: httpx.Response | None, exc: Exception | None, safe: bool) -> bool:
    """429/503/504 and a 409 "Lease lost" wrote nothing, and a refused connection sent nothing: always retried.
    Other transport errors (the request may have landed) only for `safe` calls: reads, deletes, and steps (their
    Idempotency-Key)."""
    if exc is not None:
        return safe or isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))
    if resp is None:
        return False
    return resp.status_code in RETRY_STATUS or (resp.status_code == 409 and _title(resp) == LEASE_LOST)


def _title(resp: httpx.Response) -> str | None:
    try:
        body = resp.json()
    except ValueError:
        return None
    return body.get("title") if isinstance(body, dict) else None


def _wait(retry: RetryPolicy, i: int, resp: httpx.Response | None) -> float:
    """The backoff, or the service's Retry-After when it gave one (capped at max_backoff_s)."""
    after = resp.headers.get("Retry-After") if resp is not None else None
    if after and after.replace(".", "", 1).isdigit():
        return min(retry.max_backoff_s, float(after))
    return retry.delay(i)


def _safe(method: str, path: str) -> bool:
    return method in ("GET", "HEAD", "DELETE") or path.endswith("/step")


def _result(resp: httpx.Response):
    if resp.status_code >= 400:
        raise error_for(resp)
    if resp.status_code == 204 or not resp.content:
        return None
    return resp.json()


# ---- sync ----------------------------------------------------------------------------------------------------
class EvoHarnessClient:
    """Blocking client. ``transport`` plugs a custom httpx transport (tests, proxies)."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", *, api_key: str | None = None,
                 timeout: float = 120.0, retry: RetryPolicy | None = None, headers: dict | None = None,
                 transport: httpx.BaseTransport | None = None):
        self.retry = retry or RetryPolicy()
        self.http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout,
                                 headers=_headers(api_key, headers), transport=transport)

    def __enter__(self) -> EvoHarnessClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kw):
        """One call with retries; returns the decoded JSON (None for 204) or raises an ApiError."""
        for i in range(self.retry.attempts):
            resp, exc = None, None
            try:
                resp = self.http.request(method, path, **kw)
            except httpx.TransportError as e:
                exc = e
            last = i == self.retry.attempts - 1
            if not last and _retryable(resp, exc, _safe(method, path)):
                time.sleep(_wait(self.retry, i, resp))
                continue
            if exc is not None:
                raise exc
            return _result(resp)
        raise AssertionError("unreachable")

    # sessions
    def create_session(self, task: str, *, domain: str = "generic", mode: str = "inline", bank: str = "default",
                       metadata: dict | None = None, modules: list[str] | None = None, max_steps: int | None = None,
                       harness_cap: int | None = None) -> Created:
        d = self.request("POST", "/v1/sessions",
                         json=_session_body(task, domain, mode, bank, metadata, modules, max_steps, harness_cap))
        return Created(d["session_id"], int(d["version"]))

    def step(self, session_id: str, observation: str, admissible_actions: list[str] | None = None, *,
             won: bool | None = None, done: bool | None = None, idempotency_key: str | None = None,
             if_match: int | None = None) -> Step:
        body, headers = _step_request(observation, admissible_actions, won, done, idempotency_key, if_match)
        return Step.of(self.request("POST", f"/v1/sessions/{session_id}/step", json=body, headers=headers))

    def state(self, session_id: str, version: int | None = None) -> dict:
        params = {} if version is None else {"version": version}
        return self.request("GET", f"/v1/sessions/{session_id}/state", params=params)

    def audit(self, session_id: str, after: int = 0, limit: int = 100) -> dict:
        return self.request("GET", f"/v1/sessions/{session_id}/audit", params={"after": after, "limit": limit})

    def audit_all(self, session_id: str, page: int = 500) -> list[dict]:
        events, after = [], 0
        while True:
            p = self.audit(session_id, after, page)
            events += p["events"]
            if p["next"] is None:
                return events
            after = p["next"]

    def diff(self, session_id: str, from_version: int, to_version: int) -> dict:
        return self.request("GET", f"/v1/sessions/{session_id}/diff",
                            params={"from": from_version, "to": to_version})

    def end(self, session_id: str, won: bool) -> dict:
        return self.request("POST", f"/v1/sessions/{session_id}/end", json={"won": won})

    def delete(self, session_id: str) -> None:
        self.request("DELETE", f"/v1/sessions/{session_id}")

    def set_controls(self, session_id: str, **controls) -> dict:
        return self.request("PATCH", f"/v1/sessions/{session_id}/controls", json=controls)

    # banks
    def bank(self, name: str = "default") -> dict:
        return self.request("GET", f"/v1/banks/{name}")

    def consolidate(self, name: str = "default") -> dict:
        return self.request("POST", f"/v1/banks/{name}/consolidate")

    def bank_audit(self, name: str = "default", after: int = 0, limit: int = 100) -> dict:
        return self.request("GET", f"/v1/banks/{name}/audit", params={"after": after, "limit": limit})

    def set_bank_controls(self, name: str = "default", **controls) -> dict:
        return self.request("PATCH", f"/v1/banks/{name}/controls", json=controls)

    # ops
    def ready(self) -> dict:
        return self.request("GET", "/readyz")

    def wait_ready(self, timeout_s: float = 300.0, poll_s: float = 1.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.http.get("/readyz").raise_for_status().json()
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(poll_s)


# ---- async ---------------------------------------------------------------------------------------------------
class AsyncEvoHarnessClient:
    """The same API as :class:`EvoHarnessClient`, awaitable. ``transport`` may be ``httpx.ASGITransport(app)``."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", *, api_key: str | None = None,
                 timeout: float = 120.0, retry: RetryPolicy | None = None, headers: dict | None = None,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.retry = retry or RetryPolicy()
        self.http = httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout,
                                      headers=_headers(api_key, headers), transport=transport)

    async def __aenter__(self) -> AsyncEvoHarnessClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def request(self, method: str, path: str, **kw):
        for i in range(self.retry.attempts):
            resp, exc = None, None
            try:
                resp = await self.http.request(method, path, **kw)
            except httpx.TransportError as e:
                exc = e
            last = i == self.retry.attempts - 1
            if not last and _retryable(resp, exc, _safe(method, path)):
                await asyncio.sleep(_wait(self.retry, i, resp))
                continue
            if exc is not None:
                raise exc
            return _result(resp)
        raise AssertionError("unreachable")

    async def create_session(self, task: str, *, domain: str = "generic", mode: str = "inline",
                             bank: str = "default", metadata: dict | None = None, modules: list[str] | None = None,
                             max_steps: int | None = None, harness_cap: int | None = None) -> Created:
        d = await self.request("POST", "/v1/sessions",
                               json=_session_body(task, domain, mode, bank, metadata, modules, max_steps, harness_cap))
        return Created(d["session_id"], int(d["version"]))

    async def step(self, session_id: str, observation: str, admissible_actions: list[str] | None = None, *,
                   won: bool | None = None, done: bool | None = None, idempotency_key: str | None = None,
                   if_match: int | None = None) -> Step:
        body, headers = _step_request(observation, admissible_actions, won, done, idempotency_key, if_match)
        return Step.of(await self.request("POST", f"/v1/sessions/{session_id}/step", json=body, headers=headers))

    async def state(self, session_id: str, version: int | None = None) -> dict:
        params = {} if version is None else {"version": version}
        return await self.request("GET", f"/v1/sessions/{session_id}/state", params=params)

    async def audit(self, session_id: str, after: int = 0, limit: int = 100) -> dict:
        return await self.request("GET", f"/v1/sessions/{session_id}/audit", params={"after": after, "limit": limit})

    async def audit_all(self, session_id: str, page: int = 500) -> list[dict]:
        events, after = [], 0
        while True:
            p = await self.audit(session_id, after, page)
            events += p["events"]
            if p["next"] is None:
                return events
            after = p["next"]

    async def diff(self, session_id: str, from_version: int, to_version: int) -> dict:
        return await self.request("GET", f"/v1/sessions/{session_id}/diff",
                                  params={"from": from_version, "to": to_version})

    async def end(self, session_id: str, won: bool) -> dict:
        return await self.request("POST", f"/v1/sessions/{session_id}/end", json={"won": won})

    async def delete(self, session_id: str) -> None:
        await self.request("DELETE", f"/v1/sessions/{session_id}")

    async def set_controls(self, session_id: str, **controls) -> dict:
        return await self.request("PATCH", f"/v1/sessions/{session_id}/controls", json=controls)

    async def bank(self, name: str = "default") -> dict:
        return await self.request("GET", f"/v1/banks/{name}")

    async def consolidate(self, name: str = "default") -> dict:
        return await self.request("POST", f"/v1/banks/{name}/consolidate")

    async def bank_audit(self, name: str = "default", after: int = 0, limit: int = 100) -> dict:
        return await self.request("GET", f"/v1/banks/{name}/audit", params={"after": after, "limit": limit})

    async def set_bank_controls(self, name: str = "default", **controls) -> dict:
        return await self.request("PATCH", f"/v1/banks/{name}/controls", json=controls)

    async def ready(self) -> dict:
        return await self.request("GET", "/readyz")
