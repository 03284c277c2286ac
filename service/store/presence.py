"""A writer process's presence in Redis, so that the leases of a process that died are taken at once instead of
after they lapse.

Each process subscribes to one Pub/Sub channel of its own, `{ns}:presence:<id>`, on a connection of its own, and
writes its lease tokens as `<id>.<random>`. Redis drops a client's subscriptions the moment its connection closes,
and the kernel closes a process's sockets when it dies (SIGKILL, the OOM killer, a crash). When `DocStore.begin`
finds a lease held by another process, its script asks in the same call whether that process's channel still has
a subscriber (`PUBSUB NUMSUB`); if none, the lease is taken over there and then (docs/reliability.md).

What presence does not change:

- A stalled process (SIGSTOP, a blocked event loop) keeps its connection, so its leases lapse as before, `lease_ms`
  after the last renewal; the commit fence refuses it afterwards.
- A live process whose presence connection dropped (a Redis restart, a cut connection) may have its leases taken
  while it is resubscribing. Its commits are then refused by the same fence, exactly as after a lapse: the step
  answers 409 and the client's retry runs it again. Nothing is written twice.
- A machine that vanishes without closing its sockets is noticed by Redis only through TCP keepalive; until then its
  leases lapse as usual.
- On Redis Cluster subscriptions are per node, so presence is off there (`DocStore` gets none) and leases lapse.
"""

from __future__ import annotations

import asyncio
import logging
import os

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger("evoharness")

RESUBSCRIBE_PAUSE_S = 0.5   # after a failed (re)subscription, before the next try


class Presence:
    """`await presence.start()` once per process (the app's lifespan), `await presence.close()` at the end.

    `id`: this process's writer id (hex), the prefix of its lease tokens while `subscribed`; `prefix`: the channel
    name without it. A token is written with the id only while Redis has confirmed the subscription: a process that
    could not subscribe (Redis down, a proxy without Pub/Sub) writes plain tokens, which are never taken over."""

    def __init__(self, redis: Redis, namespace: str):
        self.redis = redis
        self.id = os.urandom(6).hex()
        self.prefix = f"{namespace}:presence:"
        self.channel = self.prefix + self.id
        self.subscribed = False
        self._confirmed = asyncio.Event()
        self._pubsub = None
        self._task: asyncio.Task | None = None

    async def start(self, wait_s: float = 2.0) -> None:
        """Subscribe in the background and wait up to `wait_s` for Redis to confirm it (the service may start with
        Redis down: then the subscription is retried, and tokens are plain until it succeeds)."""
        self._pubsub = self.redis.pubsub()
        self._task = asyncio.create_task(self._keep(), name="evoharness-presence")
        try:
            await asyncio.wait_for(self._confirmed.wait(), wait_s)
        except TimeoutError:
            log.warning("presence: %s not subscribed after %.1f s; leases of this process lapse as usual until it is",
                        self.channel, wait_s)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._pubsub is not None:
            await self._pubsub.aclose()
            self._pubsub = None
        self.subscribed = False

    def token(self) -> str:
        """A new lease token of this process: `<id>.<128 random bits>` while subscribed, else the random part."""
        rand = os.urandom(16).hex()
        return f"{self.id}.{rand}" if self.subscribed else rand

    async def _keep(self) -> None:
        """Subscribe, then keep reading the connection (nothing is published on it; reading is how a dropped
        connection is noticed, and redis-py then reconnects and resubscribes). Redis's confirmation of each
        (re)subscription sets `subscribed`; an error clears it until the next confirmation."""
        while True:
            try:
                if not self._pubsub.channels:
                    await self._pubsub.subscribe(self.channel)
                msg = await self._pubsub.get_message(timeout=1.0)
                if msg is not None and msg["type"] == "subscribe":
                    self.subscribed = True
                    self._confirmed.set()
            except (RedisError, OSError) as e:
                if self.subscribed:
                    log.warning("presence: connection lost (%s); resubscribing", e or type(e).__name__)
                self.subscribed = False
                await asyncio.sleep(RESUBSCRIBE_PAUSE_S)
