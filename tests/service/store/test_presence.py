"""Presence (service/store/presence.py), against a real redis-server and real writer processes: a lease held by a
process that died is taken at once, not after it lapses; a stalled process keeps its lease until the lapse; a
process's own leases and those of a writer that never subscribed are never taken over; the fence still refuses a
writer whose lease was taken; the subscription comes back after a Redis restart."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError

from service.embedded_redis import EmbeddedRedis
from service.store.docs import DocStore, VersionConflict
from service.store.presence import Presence
from tests.service.store.test_lease_failover import busy_for, ev, holder


@pytest.fixture
async def store(redis_url):
    """This process's view, with its own presence (as a replica of the service)."""
    r, ns = Redis.from_url(redis_url), f"t{uuid.uuid4().hex[:8]}"
    me = Presence(r, ns)
    await me.start()
    yield DocStore(r, ns, "s", presence=me)
    await me.close()
    await r.aclose()


async def _numsub(r, channel: str) -> int:
    return dict(await r.pubsub_numsub(channel))[channel.encode()]


async def test_a_dead_writers_lease_is_taken_at_once(store, redis_url):
    """A 60 s lease held by another process with presence: busy while it lives; SIGKILL it, and the next begin here
    takes the lease over (Redis dropped the dead process's subscription with its connection), then commits."""
    assert store.presence.subscribed and "." in store.presence.token()
    await store.create("d", {"n": 0}, {})
    proc, token = await asyncio.to_thread(holder, redis_url, store.ns, 60_000, 20_000, True)
    try:
        await busy_for(store, 0.5)                                # alive: its presence holds the lease
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait)
        t_kill = time.monotonic()
        while True:
            async with store.lease("d", 600) as held:
                if held.status == "ok":
                    waited = time.monotonic() - t_kill
                    assert held.loaded.took_over and held.token != token
                    assert await store.commit("d", 0, {"n": 1}, [ev(1)], lease_token=held.token) == 1
                    break
                assert held.status == "busy" and held.busy_ms > 50_000
            assert time.monotonic() - t_kill < 5, "the dead process's lease was not taken over"
            await asyncio.sleep(0.02)
        assert waited < 2, waited                                 # not the 60 s lease
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (await store.load("d")).state == {"n": 1}


async def test_a_stalled_writer_keeps_its_lease_until_it_lapses_and_is_fenced_after(store, redis_url):
    """SIGSTOP: the process keeps its connection, so its presence stays and nothing takes its lease early; after
    the lapse the lease is taken as usual (not a takeover) and the resumed writer's commit is refused."""
    await store.create("d", {"n": 0}, {})
    proc, token = await asyncio.to_thread(holder, redis_url, store.ns, 2_000, 500, True)
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        await busy_for(store, 0.5)                                # stalled, present: still busy
        while True:
            async with store.lease("d", 5_000) as held:
                if held.status == "ok":
                    assert not held.loaded.took_over              # the lease lapsed; nothing was taken over
                    os.kill(proc.pid, signal.SIGCONT)
                    out, _ = await asyncio.to_thread(proc.communicate, "commit\n", 30)
                    assert out.split()[:2] == ["refused", "lease"], out
                    assert await store.commit("d", 0, {"n": "here"}, [ev(1)], lease_token=held.token) == 1
                    break
            await asyncio.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
    assert (await store.load("d")).state == {"n": "here"}


async def test_own_leases_and_plain_tokens_are_never_taken_over(store, redis_url):
    await store.create("d", {"n": 0}, {})
    async with store.lease("d", 5_000) as first, store.lease("d", 5_000) as second:   # this process's own: busy
        assert first.status == "ok" and second.status == "busy"
    r = Redis.from_url(redis_url)
    try:
        never = Presence(r, store.ns)                             # never subscribed: plain tokens
        assert not never.subscribed and "." not in never.token()
        plain = DocStore(r, store.ns, "s", presence=never)
        async with plain.lease("d", 5_000) as held:
            assert held.status == "ok" and "." not in held.token
            async with store.lease("d", 5_000) as probe:
                assert probe.status == "busy"
    finally:
        await r.aclose()


async def test_a_writer_whose_presence_went_is_fenced_off(store, redis_url):
    """A live writer whose presence connection went (here: closed) loses the lease it holds to the next writer,
    and its commit is refused: the takeover never lets two writers commit."""
    r = Redis.from_url(redis_url)
    gone = Presence(r, store.ns)
    await gone.start()
    try:
        writer = DocStore(r, store.ns, "s", presence=gone)
        await store.create("d", {"n": 0}, {})
        async with writer.lease("d", 60_000) as held:
            assert held.status == "ok" and held.token.startswith(gone.id + ".")
            await gone.close()
            assert await _numsub(store.r, gone.channel) == 0
            async with store.lease("d", 5_000) as took:
                assert took.status == "ok" and took.loaded.took_over
                with pytest.raises(VersionConflict) as e:
                    await writer.commit("d", 0, {"n": "old"}, [ev(1)], lease_token=held.token)
                assert e.value.why == "lease"
                assert await store.commit("d", 0, {"n": "new"}, [ev(1)], lease_token=took.token) == 1
    finally:
        await gone.close()
        await r.aclose()
    assert (await store.load("d")).state == {"n": "new"}


async def test_presence_comes_back_after_a_redis_restart(tmp_path):
    redis = EmbeddedRedis(dir=str(tmp_path)).start()
    r = Redis.from_url(redis.url)
    me = Presence(r, "t")
    try:
        await me.start()
        assert me.subscribed and await _numsub(r, me.channel) == 1
        redis.stop()
        redis.start()
        deadline = time.monotonic() + 15
        while True:
            try:
                if me.subscribed and await _numsub(r, me.channel) == 1:
                    break
            except ConnectionError:                               # this test's own pooled connection, stale
                pass
            assert time.monotonic() < deadline, "presence did not resubscribe after the restart"
            await asyncio.sleep(0.1)
    finally:
        await me.close()
        await r.aclose()
        redis.stop()
