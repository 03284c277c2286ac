"""The engine protocol: one prompt in, one constrained completion out, with usage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class GenerationRequest:
    prompt: str                       # fully rendered prompt text (service.policy.render)
    regex: str | None = None          # output constraint (service.policy.grammar); None = free text
    json_schema: dict | None = None   # alternative constraint: output is JSON valid under this schema
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    request_id: str | None = None
    timeout_s: float | None = None    # per-request deadline (EngineTimeout); None = the engine's default
    affinity_key: str | None = None   # requests with one key go to one server where there are several (the
                                      # session id: its prefix stays in that server's cache)


@dataclass(frozen=True)
class Generation:
    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    model: str                        # model id (+ adapter) that produced it
    finish_reason: str | None = None
    extra: dict = field(default_factory=dict)


class EngineError(RuntimeError):
    """The engine failed (the API maps it to 503)."""


class EngineTimeout(EngineError):
    """The engine did not answer in time (the API maps it to 504)."""


@runtime_checkable
class Engine(Protocol):
    model_id: str

    async def start(self) -> None: ...

    async def generate(self, req: GenerationRequest) -> Generation: ...

    async def ready(self) -> bool: ...

    async def close(self) -> None: ...
