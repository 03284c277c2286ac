"""Short leases renewed by a heartbeat, against a real redis-server: a write that runs longer than its lease still
commits; a writer whose heartbeat stopped (its process or event loop stalled) never commits once its lease lapsed,
and the writer that took the document over does; a writer that dies frees the document within the lease."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from redis.asyncio import Redis

from service.store.docs import DocStore, VersionConflict

HOLDER = Path(__file__).with_name("lease_holder.py")


@pytest.fixture
async def store(redis_url):
    r = Redis.from_url(redis_url)
    yield DocStore(r, f"t{uuid.uuid4().hex[:8]}", "s")
    await r.aclose()


@pytest.fixture
async def other(store, redis_url):
    """The same documents seen from another replica (its own Redis connections)."""
    r = Redis.from_url(redis_url)
    yield DocStore(r, store.ns, "s")
    await r.aclose()


def ev(v):
    return {"version": v, "kind": "env", "patch": []}


async def test_a_write_longer_than_its_lease_commits_because_the_heartbeat_renews_it(store, other):
    await store.create("d", {"n": 0}, {})
    async with store.lease("d", 300, heartbeat_ms=100) as held:
        for _ in range(4):                                        # 1.2 s: four leases' worth
            await asyncio.sleep(0.3)
            async with other.lease("d", 300) as second:
                assert second.status == "busy" and 0 < second.busy_ms <= 300
        assert not held.lost
        assert await store.commit("d", 0, {"n": 1}, [ev(1)], lease_token=held.token, release=True) == 1
        held.released()
    assert (await store.load("d")).state == {"n": 1}
    assert await store.r.get(store.key("d", "lock")) is None
    await asyncio.sleep(0.25)                                     # the heartbeat stopped: nothing renews or re-takes
    assert await store.r.get(store.key("d", "lock")) is None


async def test_the_heartbeat_stops_with_the_block(store):
    await store.create("d", {"n": 0}, {})
    async with store.lease("d", 300, heartbeat_ms=100) as held:
        token = held.token
    await asyncio.sleep(0.25)
    assert await store.r.get(store.key("d", "lock")) is None
    assert not await store.renew("d", token, 300)                 # a released lease cannot be renewed back


async def test_a_renewal_still_on_its_way_when_the_commit_gives_the_lease_back_changes_nothing(store, monkeypatch):
    real = store.renew

    async def slow_renew(doc_id, token, lease_ms):
        await asyncio.sleep(0.2)                                  # the commit (with release) lands meanwhile
        return await real(doc_id, token, lease_ms)

    monkeypatch.setattr(store, "renew", slow_renew)
    await store.create("d", {"n": 0}, {})
    async with store.lease("d", 600, heartbeat_ms=100) as held:
        await asyncio.sleep(0.15)                                 # the first renewal is on its way
        assert await store.commit("d", 0, {"n": 1}, [ev(1)], lease_token=held.token, release=True) == 1
        held.released()
    await asyncio.sleep(0.3)
    assert not held.lost and await store.r.get(store.key("d", "lock")) is None


async def test_a_stalled_writer_does_not_commit_and_the_next_holder_does(store, other):
    """The event loop is blocked past the lease (time.sleep: a stalled replica, its heartbeat stopped too); another
    replica takes the lease; the stalled writer's heartbeat then finds it taken and its commit is refused."""
    await store.create("d", {"n": 0}, {})
    async with store.lease("d", 300, heartbeat_ms=100) as stalled:
        time.sleep(0.6)  # noqa: ASYNC251 - the stall is the point: nothing on this loop runs
        async with other.lease("d", 300, heartbeat_ms=100) as next_holder:
            assert next_holder.status == "ok" and next_holder.loaded.version == 0
            await asyncio.sleep(0.15)                             # the stalled writer's heartbeat runs again ...
            assert stalled.lost                                   # ... finds another token, and stops
            with pytest.raises(VersionConflict) as e:
                await store.commit("d", 0, {"n": "stalled"}, [ev(1)], lease_token=stalled.token, release=True)
            assert e.value.why == "lease"
            assert await store.r.get(store.key("d", "lock")) == next_holder.token.encode()
            assert await other.commit("d", 0, {"n": "next"}, [ev(1)], lease_token=next_holder.token) == 1
        # leaving the stalled block does not free a lease it lost (the next holder's is already given back here)
    loaded = await store.load("d")
    assert loaded.state == {"n": "next"} and loaded.version == 1 and len(await store.events("d")) == 1


async def test_a_lapsed_lease_is_not_taken_back_by_its_heartbeat(store):
    """Stalled past the lease with nobody else waiting: the heartbeat does not re-take the lapsed lease, and the
    commit is refused all the same (the document is unchanged, the writer's caller retries)."""
    await store.create("d", {"n": 0}, {})
    async with store.lease("d", 300, heartbeat_ms=100) as held:
        time.sleep(0.5)  # noqa: ASYNC251
        await asyncio.sleep(0.15)
        assert held.lost and await store.r.get(store.key("d", "lock")) is None
        with pytest.raises(VersionConflict) as e:
            await store.commit("d", 0, {"n": 1}, [ev(1)], lease_token=held.token)
        assert e.value.why == "lease"
    assert (await store.load("d")).version == 0


def holder(redis_url, ns, lease_ms, heartbeat_ms, presence=False):
    """A lease_holder.py process holding document "d": (the process, its lease token)."""
    proc = subprocess.Popen([sys.executable, str(HOLDER), redis_url, ns, "d", str(lease_ms), str(heartbeat_ms),
                             *(["presence"] if presence else [])],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().split()
    assert line[:1] == ["held"], line
    return proc, line[1]


async def busy_for(store, seconds):
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        async with store.lease("d", 600) as probe:
            assert probe.status == "busy"
        await asyncio.sleep(0.05)


async def test_a_writer_that_dies_frees_the_document_within_the_lease(store, redis_url):
    """Another process holds the lease; its heartbeat keeps it past several leases; SIGKILL it, and this process
    takes the document within the lease time (here 600 ms; the service's default is 3 s)."""
    await store.create("d", {"n": 0}, {})
    proc, _ = await asyncio.to_thread(holder, redis_url, store.ns, 600, 200)
    try:
        await busy_for(store, 1.5)                               # 2.5 leases: renewed from the other process
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait)
        t_kill = time.monotonic()
        while True:
            async with store.lease("d", 600) as held:
                if held.status == "ok":
                    waited = time.monotonic() - t_kill
                    assert await store.commit("d", 0, {"n": 1}, [ev(1)], lease_token=held.token) == 1
                    break
                assert held.status == "busy" and held.busy_ms <= 600
            await asyncio.sleep(0.02)
        assert waited <= 0.6 + 0.3, waited                        # the lease since its last renewal, plus polling
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_a_stalled_process_does_not_commit_after_another_took_over(store, redis_url):
    """SIGSTOP the holding process past its lease (a stalled replica) and take the document over here; SIGCONT it
    and let it commit while this process still holds the lease: refused by the lease fence (the version has not
    moved), its exit leaves this lease alone, and this process then commits."""
    await store.create("d", {"n": 0}, {})
    proc, token = await asyncio.to_thread(holder, redis_url, store.ns, 400, 130)
    try:
        await busy_for(store, 0.8)
        os.kill(proc.pid, signal.SIGSTOP)
        await asyncio.sleep(0.7)
        async with store.lease("d", 400, heartbeat_ms=130) as held:
            assert held.status == "ok" and held.token != token
            os.kill(proc.pid, signal.SIGCONT)
            out, _ = await asyncio.to_thread(proc.communicate, "commit\n", 30)
            assert out.split()[:2] == ["refused", "lease"], out
            assert await store.r.get(store.key("d", "lock")) == held.token.encode()
            assert await store.commit("d", 0, {"n": "here"}, [ev(1)], lease_token=held.token, release=True) == 1
            held.released()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    loaded = await store.load("d")
    assert loaded.state == {"n": "here"} and loaded.version == 1 and len(await store.events("d")) == 1
