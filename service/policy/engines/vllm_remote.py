"""Remote vLLM engine: OpenAI-compatible ``/v1/completions`` on one or more vLLM servers.

Request body (vLLM 0.32 server)::

    POST {base}/v1/completions
    {"model": "<served name or LoRA name>", "prompt": "<rendered prompt>", "max_tokens": 256,
     "temperature": 0.0, "top_p": 1.0, "seed": 7,
     "structured_outputs": {"regex": "<regex>"}}

``structured_outputs`` is vLLM's extension field of ``CompletionRequest`` (the old ``guided_regex`` is
gone). The response's ``usage`` gives ``prompt_tokens`` / ``completion_tokens``.

Load spreading (``policy``):

- ``affinity`` (the service's default): a request with an ``affinity_key`` (the service passes the session id)
  goes to the server that key ranks first by rendezvous hashing, so every step of a session lands where the
  previous step's prompt already sits in vLLM's prefix cache. When a server is down only its own keys move.
  Requests without a key fall back to ``least_outstanding``.
- ``least_outstanding``: the server with the fewest requests in flight from this client (ties round robin).
- ``round_robin``.

A server that refuses the connection (or answers 5xx) is put on a short cool-down and the request fails over
to the next server; 4xx answers are the caller's fault and are not retried. Generation has no side effects, so
a retry on another server is safe.

A LoRA adapter served by vLLM (``--enable-lora --lora-modules NAME=PATH``) is selected by passing
``adapter=NAME``: the request's ``model`` is then the adapter name.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import time
from dataclasses import dataclass

import httpx

from service.policy.engines.base import EngineError, EngineTimeout, Generation, GenerationRequest

log = logging.getLogger(__name__)

POLICIES = ("affinity", "least_outstanding", "round_robin")


@dataclass
class _Server:
    url: str
    outstanding: int = 0
    down_until: float = 0.0
    requests: int = 0
    failures: int = 0


class RemoteVLLMEngine:
    """``Engine`` that calls vLLM OpenAI-compatible servers over HTTP.

    Options:
      urls         base URLs (``http://host:port``, with or without ``/v1``), one or more
      model        served model name; None = the first id of ``/v1/models`` at start()
      adapter      served LoRA name (request ``model`` field); reported in ``model_id``
      timeout_s    default per-request timeout (``EngineTimeout``); None = no deadline
      connect_timeout_s  connection timeout per attempt (then fail over)
      cooldown_s   how long a server that failed is skipped (unless all are down)
      policy       "least_outstanding" (default), "affinity" or "round_robin" (module docstring)
      api_key      optional bearer token (vLLM ``--api-key``)
    """

    def __init__(
        self,
        urls: str | list[str],
        *,
        model: str | None = None,
        adapter: str | None = None,
        timeout_s: float | None = 120.0,
        connect_timeout_s: float = 2.0,
        cooldown_s: float = 5.0,
        policy: str = "least_outstanding",
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if isinstance(urls, str):
            urls = [u for u in urls.split(",") if u.strip()]
        if not urls:
            raise ValueError("RemoteVLLMEngine needs at least one server URL")
        if policy not in POLICIES:
            raise ValueError(f"unknown load policy {policy!r}; expected one of {POLICIES}")
        self.servers = [_Server(self._base(u)) for u in urls]
        self.model = model
        self.adapter = adapter
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.cooldown_s = cooldown_s
        self.policy = policy
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._rr = itertools.count()
        self.model_id = self._compose_model_id()

    @staticmethod
    def _base(url: str) -> str:
        url = url.strip().rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url

    def _compose_model_id(self) -> str:
        base = self.model or "remote"
        return f"{base}+{self.adapter}" if self.adapter else base

    # -- lifecycle --------------------------------------------------------------------------------------

    def _ensure_client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                headers=self._headers,
                timeout=httpx.Timeout(None, connect=self.connect_timeout_s),
                limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
                transport=self._transport,
            )
        return self._client

    async def start(self) -> None:
        self._ensure_client()
        if self.model is None:
            self.model = await self._discover_model()
            self.model_id = self._compose_model_id()

    async def _discover_model(self) -> str:
        client = self._ensure_client()
        errors = []
        for s in self.servers:
            try:
                r = await client.get(f"{s.url}/v1/models", timeout=self.connect_timeout_s + 3)
                r.raise_for_status()
                data = r.json().get("data") or []
                # LoRA modules are listed too; they carry a "parent" pointing at the base model.
                bases = [m["id"] for m in data if not m.get("parent")] or [m["id"] for m in data]
                if bases:
                    return bases[0]
            except (httpx.HTTPError, ValueError, KeyError) as e:
                errors.append(f"{s.url}: {type(e).__name__}: {e}")
        raise EngineError("no vLLM server answered /v1/models: " + "; ".join(errors))

    async def ready(self) -> bool:
        client = self._ensure_client()

        async def one(s: _Server) -> bool:
            try:
                r = await client.get(f"{s.url}/health", timeout=self.connect_timeout_s + 1)
                return r.status_code == 200
            except httpx.HTTPError:
                return False

        return any(await asyncio.gather(*(one(s) for s in self.servers)))

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # -- routing ----------------------------------------------------------------------------------------

    def _order(self, affinity_key: str | None = None) -> list[_Server]:
        """Servers in the order to try: healthy ones first by policy, then cooling-down ones."""
        now = time.monotonic()
        n = len(self.servers)
        start = next(self._rr) % n
        rotated = self.servers[start:] + self.servers[:start]
        up = [s for s in rotated if s.down_until <= now]
        down = sorted((s for s in rotated if s.down_until > now), key=lambda s: s.down_until)
        if self.policy == "affinity" and affinity_key is not None:
            up.sort(key=lambda s: rendezvous_rank(affinity_key, s.url))
        elif self.policy in ("least_outstanding", "affinity"):
            up.sort(key=lambda s: s.outstanding)  # stable: ties keep the rotated (round-robin) order
        return up + down

    def stats(self) -> list[dict]:
        return [
            dict(url=s.url, outstanding=s.outstanding, requests=s.requests, failures=s.failures,
                 down=s.down_until > time.monotonic())
            for s in self.servers
        ]

    # -- generation -------------------------------------------------------------------------------------

    def _body(self, req: GenerationRequest) -> dict:
        body: dict = {
            "model": self.adapter or self.model,
            "prompt": req.prompt,
            "max_tokens": req.max_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "n": 1,
            "stream": False,
        }
        if req.seed is not None:
            body["seed"] = req.seed
        if req.regex is not None:
            body["structured_outputs"] = {"regex": req.regex}
        elif req.json_schema is not None:
            body["structured_outputs"] = {"json": req.json_schema}
        if req.request_id:
            body["request_id"] = req.request_id
        return body

    async def generate(self, req: GenerationRequest) -> Generation:
        if self.model is None:
            await self.start()
        timeout = self.timeout_s if req.timeout_s is None else req.timeout_s
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):
                data, server = await self._post_with_failover(self._body(req), req.affinity_key)
        except TimeoutError as e:
            raise EngineTimeout(f"remote vLLM generation exceeded {timeout} s") from e
        seconds = time.perf_counter() - t0
        try:
            choice = data["choices"][0]
            usage = data.get("usage") or {}
            return Generation(
                text=choice["text"],
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", 0)),
                seconds=seconds,
                model=self.model_id,
                finish_reason=choice.get("finish_reason"),
                extra={"server": server, "id": data.get("id"), "served_model": data.get("model")},
            )
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise EngineError(f"malformed completion response from {server}: {e}") from e

    async def _post_with_failover(self, body: dict, affinity_key: str | None = None) -> tuple[dict, str]:
        client = self._ensure_client()
        errors: list[str] = []
        for s in self._order(affinity_key):
            s.outstanding += 1
            s.requests += 1
            try:
                r = await client.post(f"{s.url}/v1/completions", json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError) as e:
                # Not processed (or connection dropped): safe to try the next server.
                self._mark_down(s)
                errors.append(f"{s.url}: {type(e).__name__}: {e}")
                continue
            except httpx.HTTPError as e:
                self._mark_down(s)
                errors.append(f"{s.url}: {type(e).__name__}: {e}")
                continue
            finally:
                s.outstanding -= 1
            if r.status_code >= 500:
                self._mark_down(s)
                errors.append(f"{s.url}: HTTP {r.status_code}: {r.text[:300]}")
                continue
            if r.status_code >= 400:
                raise EngineError(f"vLLM server {s.url} rejected the request: HTTP {r.status_code}: {r.text[:500]}")
            s.down_until = 0.0
            try:
                return r.json(), s.url
            except ValueError as e:
                raise EngineError(f"non-JSON response from {s.url}: {e}") from e
        raise EngineError("all vLLM servers failed: " + "; ".join(errors))

    def _mark_down(self, s: _Server) -> None:
        s.failures += 1
        s.down_until = time.monotonic() + self.cooldown_s
        log.warning("vLLM server %s failed; skipping it for %.1f s", s.url, self.cooldown_s)


def rendezvous_rank(key: str, url: str) -> bytes:
    """Sort key of ``url`` for ``key`` (lowest first): highest-random-weight hashing, stable across processes,
    so every replica of the service sends a session to the same server."""
    return hashlib.blake2b(f"{key}\x00{url}".encode(), digest_size=8).digest()
