"""The step route's request handler: a fast path for the well-formed request, FastAPI's own handler for the rest.

The step is the one route a product agent calls once per environment step, so FastAPI's generic request
handling is a visible share of its cost: the content type parsed through `email.message`, the body decoded by
`json.loads` and then validated as Python objects, and a dependency-solving pass per request. For a request
whose `Content-Type` is `application/json`, `StepRoute` instead authenticates with the route's own dependency
(`STEP_AUTH`: 401, 403 exactly as FastAPI would raise them, in the same order, before the body is looked at),
validates the body bytes in one pass with pydantic (`StepIn.model_validate_json`) and calls the endpoint.

Anything else takes FastAPI's handler, unchanged: another content type, a body that does not validate (the
422 it answers is FastAPI's, byte for byte, because FastAPI builds it), and any app with dependency overrides.
A body that the fast path accepts validates to the same `StepIn` on FastAPI's path: JSON strings, arrays, booleans
and null map one to one onto what `json.loads` gives, and pydantic's lax rules for str, list[str] and bool are
the same for JSON and for those Python values (tests/service/api/test_fast_route.py compares the two paths).
"""

from __future__ import annotations

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import ValidationError

from service.api.deps import STEP_AUTH
from service.api.schemas import StepIn


def is_json(content_type: str | None) -> bool:
    """`application/json`, with or without parameters (`; charset=utf-8`), any letter case."""
    return content_type is not None and content_type.partition(";")[0].strip().lower() == "application/json"


class StepRoute(APIRoute):
    """The route class of POST /v1/sessions/{session_id}/step (see the module docstring)."""

    def get_route_handler(self):
        standard = super().get_route_handler()
        endpoint = self.endpoint

        async def handler(request: Request) -> Response:
            if is_json(request.headers.get("content-type")) and not request.app.dependency_overrides:
                who = await STEP_AUTH(request)
                try:
                    body = StepIn.model_validate_json(await request.body())
                except ValidationError:
                    pass  # FastAPI's handler reads the (cached) body again and answers its own 422
                else:
                    return await endpoint(request, request.path_params["session_id"], body, who)
            return await standard(request)

        return handler
