"""/v1/sessions: create, step, state (time travel), audit, diff, end, delete, controls."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic_core import to_json

from service.api.deps import (
    UNCOUNTED_OPENAPI,
    CanAudit,
    CanControlSession,
    CanCreate,
    CanDelete,
    CanEnd,
    CanReadState,
    CanStepUncounted,
    SessionsDep,
)
from service.api.fast_route import StepRoute
from service.api.schemas import AuditPage, EndIn, SessionControls, SessionCreate, SessionCreated, StepIn, StepOut
from service.problems import ApiError

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])
SessionId = Annotated[str, "session id"]


@router.post("", status_code=201, response_model=SessionCreated, summary="Start a session")
async def create_session(body: SessionCreate, sessions: SessionsDep, who: CanCreate):
    return await sessions.create(body, who.tenant, who.key_id)


def _if_match(value: str | None) -> int | None:
    if value is None:
        return None
    v = value.strip().strip('"')
    if not v.isdigit():
        raise ApiError(400, "Bad If-Match", f"If-Match must be a version number, got {value!r}")
    return int(v)


def _optional_header(name: str) -> dict:
    return {"name": name, "in": "header", "required": False,
            "schema": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": name}}


# The step route reads its two optional headers itself and documents them as FastAPI would for
# `Annotated[str | None, Header(alias=...)]` parameters: FastAPI's header-parameter extraction (a pass over every
# request header with type introspection per field) was a measurable part of the per-step overhead.
_STEP_HEADERS = {"parameters": [_optional_header("Idempotency-Key"), _optional_header("If-Match")]}


# The step is counted against the key's rate limit in the Redis call that takes the session's lease
# (SessionService.step), not in the auth dependency: one round trip fewer per step. So its errors come in this
# order: 401, 403, 422 (body), 400 (headers), 413/422 (observation, actions), then 429 (counted), then 404/409.
async def step(
    request: Request,
    session_id: SessionId,
    body: StepIn,
    who: CanStepUncounted,
):
    headers = request.headers
    idempotency_key, if_match = headers.get("idempotency-key"), headers.get("if-match")
    if idempotency_key is not None and not (1 <= len(idempotency_key) <= 128):
        raise ApiError(400, "Bad Idempotency-Key", "Idempotency-Key must be 1-128 characters")
    sessions = request.app.state.sessions  # not a dependency: the hot path skips FastAPI's per-dependency cost
    out = await sessions.step(session_id, body, idem_key=idempotency_key, if_match=_if_match(if_match),
                              tenant=who.tenant, key_id=who.key_id)
    # The body SessionService.step built (fields in StepOut's order and types), written by pydantic's serializer
    # as FastAPI would write it after validating against StepOut (the same bytes), without that validation.
    return Response(to_json(out), media_type="application/json")


router.add_api_route("/{session_id}/step", step, methods=["POST"], response_model=StepOut,
                     summary="Send an observation, get the next action",
                     openapi_extra={**_STEP_HEADERS, **UNCOUNTED_OPENAPI}, route_class_override=StepRoute)


@router.get("/{session_id}/state", summary="Current state, or the state at `version` (time travel)")
async def get_state(session_id: SessionId, sessions: SessionsDep, who: CanReadState,
                    version: Annotated[int | None, Query(ge=0)] = None):
    return await sessions.state(session_id, version, who.tenant)


@router.get("/{session_id}/audit", response_model=AuditPage,
            summary="Audit events (JSON, or NDJSON with Accept: application/x-ndjson)")
async def get_audit(request: Request, session_id: SessionId, sessions: SessionsDep, who: CanAudit,
                    after: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=1000)] = 100):
    page = await sessions.audit(session_id, after, limit, who.tenant)
    if "application/x-ndjson" in request.headers.get("accept", ""):
        lines = (json.dumps(e) + "\n" for e in page["events"])
        headers = {"X-Next-After": str(page["next"])} if page["next"] is not None else {}
        return StreamingResponse(lines, media_type="application/x-ndjson", headers=headers)
    return page


@router.get("/{session_id}/diff", summary="JSON Patch turning version `from` into version `to`")
async def get_diff(session_id: SessionId, sessions: SessionsDep, who: CanAudit,
                   from_: Annotated[int, Query(alias="from", ge=0)], to: Annotated[int, Query(ge=0)]):
    return await sessions.diff(session_id, from_, to, who.tenant)


@router.post("/{session_id}/end", summary="Finish the episode; its evidence goes to the bank")
async def end(session_id: SessionId, body: EndIn, sessions: SessionsDep, who: CanEnd):
    return await sessions.end(session_id, body.won, who.tenant, who.key_id)


@router.delete("/{session_id}", status_code=204, summary="Delete a session and its audit log")
async def delete(session_id: SessionId, sessions: SessionsDep, who: CanDelete):
    await sessions.delete(session_id, who.tenant)
    return Response(status_code=204)


@router.patch("/{session_id}/controls", summary="Operator controls: pins, disabled verbs, harness cap")
async def controls(session_id: SessionId, body: SessionControls, sessions: SessionsDep, who: CanControlSession):
    return await sessions.set_controls(session_id, body, who.tenant, who.key_id)
