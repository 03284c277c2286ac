"""The FastAPI application: `create_app(settings, engine)`."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI

from service import __version__
from service.api import errors
from service.api.routes import banks, health, sessions, ui
from service.auth import load_keyring
from service.banks import BankService, load_bank_seed, seed_path
from service.policy.engines.base import Engine
from service.policy.render import transcript_chars_for
from service.rate_limit import RateLimiter
from service.sessions import SessionService
from service.settings import Settings, model_context_len
from service.store.docs import DocStore
from service.store.presence import Presence

log = logging.getLogger("evoharness")

# A Redis command's write and its read each time out after REDIS_SOCKET_TIMEOUT_S, a new connection after
# REDIS_CONNECT_TIMEOUT_S (redis TimeoutError): a Redis that stops answering gives 503 after the retries below.
REDIS_SOCKET_TIMEOUT_S = 5.0
REDIS_CONNECT_TIMEOUT_S = 2.0


def connect_redis(settings: Settings):
    if settings.redis_url is None:
        raise RuntimeError("REDIS_URL is not set (evoharness serve starts a private redis-server when it is unset)")
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    # After a Redis restart every pooled connection is stale: retry a command on a fresh connection instead of
    # answering 503. Safe for writes: a commit is version-checked, so a replayed commit is refused, never doubled.
    kw = dict(socket_timeout=REDIS_SOCKET_TIMEOUT_S, socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
              health_check_interval=10,
              retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 3),
              retry_on_error=[RedisConnectionError, RedisTimeoutError])
    if settings.redis_cluster:
        from redis.asyncio.cluster import RedisCluster

        return RedisCluster.from_url(settings.redis_url, **kw)
    from service.store.redis_client import service_client

    # redis-py's client with a shorter per-command path, same timeouts and retries (service/store/redis_client.py)
    return service_client(settings.redis_url, **kw)


def build_engine(settings: Settings) -> Engine:
    from service.policy.engines.factory import make_engine

    if settings.engine == "remote":
        return make_engine("remote", urls=settings.remote_urls, model=settings.model, adapter=settings.adapter,
                           timeout_s=settings.engine_timeout_s, policy=settings.remote_policy)
    return make_engine(settings.engine, model=settings.model, adapter=settings.adapter,
                       max_model_len=settings.max_model_len or model_context_len(settings.model),
                       kv_cache_gib=settings.kv_cache_gib,
                       enforce_eager=settings.enforce_eager, seed=settings.seed or 0,
                       timeout_s=settings.engine_timeout_s,
                       **({"dtype": settings.dtype} if settings.engine in ("vllm", "local", "vllm_local") else {}))


class BodyLimit:
    """413 for bodies over the limit: by Content-Length before they are read; a body without Content-Length
    (chunked) is read up to the limit first and refused as soon as it passes it."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers", []))
            size = headers.get(b"content-length")
            if size is not None and size.isdigit() and int(size) > self.limit:
                await self._refuse(f"body has {int(size)} bytes; limit {self.limit}", scope, receive, send)
                return
            if size is None and scope.get("method") in ("POST", "PUT", "PATCH"):
                chunks, total, more = [], 0, True
                while more:
                    msg = await receive()
                    if msg["type"] != "http.request":
                        return  # client went away before sending its body
                    chunks.append(msg.get("body", b""))
                    total += len(chunks[-1])
                    more = msg.get("more_body", False)
                    if total > self.limit:
                        await self._refuse(f"body passed {self.limit} bytes (the limit)", scope, receive, send)
                        return
                body = b"".join(chunks)
                replayed = False

                async def replay():
                    nonlocal replayed
                    if not replayed:
                        replayed = True
                        return {"type": "http.request", "body": body, "more_body": False}
                    return await receive()

                await self.app(scope, replay, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(detail: str, scope, receive, send) -> None:
        await errors.problem(413, "Request too large", detail)(scope, receive, send)


def create_app(settings: Settings | None = None, engine: Engine | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        r = connect_redis(settings)
        eng = engine or build_engine(settings)
        await eng.start()
        # this process's presence: a replica that dies frees its leases at once (not on Redis Cluster)
        presence = Presence(r, settings.namespace) if settings.lease_takeover and not settings.redis_cluster else None
        if presence is not None:
            await presence.start()
        bank_docs = DocStore(r, settings.namespace, "b", presence=presence)
        app.state.banks = BankService(bank_docs, cap=settings.bank_cap, lease_ms=settings.step_lease_ms, engine=eng,
                                      heartbeat_ms=settings.lease_heartbeat_ms, seed=bank_seed,
                                      # JSON costs more tokens per character than prose: 60 % of a step's bound
                                      evolver_chars=int(0.6 * transcript_chars_for(context)))
        app.state.rate_limiter = (RateLimiter(r, settings.namespace, settings.rate_limit, settings.rate_window_s)
                                  if settings.rate_limit > 0 else None)
        session_docs = DocStore(r, settings.namespace, "s", live_index="active",  # {ns}:active: live sessions
                                presence=presence)
        app.state.sessions = SessionService(settings, session_docs, app.state.banks, eng,
                                            limiter=app.state.rate_limiter)
        log.info("evoharness ready: engine=%s model=%s", settings.engine, eng.model_id)
        try:
            yield
        finally:
            if engine is None:
                await eng.close()
            if presence is not None:
                await presence.close()
            await r.aclose()

    app = FastAPI(
        title="EvoHarness",
        version=__version__,
        description="Serve a trained harness policy: one `step` call per environment step.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.keyring = load_keyring(settings)  # refuses to start with auth on and no keys; warns loudly if off
    context = settings.max_model_len or model_context_len(settings.model)
    seed_file = seed_path(settings.bank_seed, settings.model)   # a bad seed file stops the start here, not a step
    bank_seed = load_bank_seed(seed_file) if seed_file else None
    if seed_file:
        log.info("new banks start from %s (%d entries)", seed_file, len(bank_seed["entries"]))
    errors.install(app)
    app.include_router(sessions.router)
    app.include_router(banks.router)
    app.include_router(health.router)
    app.include_router(ui.router)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    return app
