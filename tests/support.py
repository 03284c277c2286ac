"""Helpers shared by tests (importable as tests.support)."""

from __future__ import annotations

import uuid


def make_settings(redis_url: str, **kw):
    from service.settings import Settings

    base = dict(redis_url=redis_url, namespace=f"t{uuid.uuid4().hex[:8]}", engine="vllm")
    base.update(kw)
    return Settings(**base)


class Client:
    """An httpx client bound to a started app (lifespan run), for one test."""

    def __init__(self, app):
        import httpx

        self.app = app
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://evoharness")

    async def __aenter__(self):
        self._ctx = self.app.router.lifespan_context(self.app)
        await self._ctx.__aenter__()
        return self.http

    async def __aexit__(self, *exc):
        await self.http.aclose()
        await self._ctx.__aexit__(*exc)
