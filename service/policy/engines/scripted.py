"""ScriptedEngine: a zero-cost, deterministic engine that replays given responses.

Use it ONLY for unit tests of a single module that needs *some* engine (e.g. the step loop's
bookkeeping) and for the service-overhead benchmark (what the service costs without a model).
It is never used to verify a feature: it does not tokenise, does not sample and does NOT apply the
``regex`` constraint — its outputs are whatever the script says. Features that depend on generation
(grammar-constrained actions, token accounting, engine errors) are tested with the real ``VLLMEngine``
/ ``RemoteVLLMEngine``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable

from service.policy.engines.base import EngineError, Generation, GenerationRequest

Responder = Callable[[GenerationRequest], str]


class ScriptedEngine:
    """Replays ``responses`` in order (cycling when ``cycle=True``), or calls ``responder(req)``.

    Token counts are whitespace-split word counts (a stand-in, not real tokens). Every request is kept in
    ``self.requests`` so a test can inspect what was asked.
    """

    def __init__(
        self,
        responses: Iterable[str] | None = None,
        *,
        responder: Responder | None = None,
        cycle: bool = True,
        model_id: str = "scripted",
    ) -> None:
        if (responses is None) == (responder is None):
            raise ValueError("give exactly one of responses or responder")
        self._responses = list(responses) if responses is not None else None
        if self._responses is not None and not self._responses:
            raise ValueError("responses must not be empty")
        self._responder = responder
        self._cycle = cycle
        self._index = itertools.count()
        self.model_id = model_id
        self.requests: list[GenerationRequest] = []
        self._started = False

    async def start(self) -> None:
        self._started = True

    async def ready(self) -> bool:
        return self._started

    async def close(self) -> None:
        self._started = False

    async def generate(self, req: GenerationRequest) -> Generation:
        t0 = time.perf_counter()
        self.requests.append(req)
        if self._responder is not None:
            text = self._responder(req)
        else:
            i = next(self._index)
            if i >= len(self._responses) and not self._cycle:
                raise EngineError("ScriptedEngine ran out of responses")
            text = self._responses[i % len(self._responses)]
        return Generation(
            text=text,
            prompt_tokens=len(req.prompt.split()),
            completion_tokens=max(1, len(text.split())),
            seconds=time.perf_counter() - t0,
            model=self.model_id,
            finish_reason="stop",
        )
