"""The service's Redis client (service/store/redis_client.py): on Python 3.11 its connections bound a write with
`asyncio.timeout` instead of redis-py's `asyncio.wait_for`, with the same outcome. Against a redis-server that
stops answering (SIGSTOP: its connections stay open, nothing is read or answered): a write that cannot finish and a
read that gets no answer each fail with redis TimeoutError after socket_timeout and drop the connection."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from redis.asyncio import Redis
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.embedded_redis import EmbeddedRedis
from service.store.redis_client import (
    NEEDS_TASKLESS_WRITES,
    _WriteTimeoutInTask,
    timeout_writes_in_task,
)

TIMEOUT_S = 0.5


@pytest.fixture
def redis():
    server = EmbeddedRedis().start()
    try:
        yield server
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        server.stop()


@pytest.fixture
async def conn(redis):
    """A connected connection of the service's client kind (no retries: one command, one outcome)."""
    client = timeout_writes_in_task(Redis.from_url(redis.url, socket_timeout=TIMEOUT_S,
                                                   socket_connect_timeout=TIMEOUT_S))
    c = await client.connection_pool.get_connection()
    assert isinstance(c, _WriteTimeoutInTask) == NEEDS_TASKLESS_WRITES
    yield c
    await client.connection_pool.release(c)
    await client.aclose()


async def test_commands_work_as_before(redis):
    r = timeout_writes_in_task(Redis.from_url(redis.url, socket_timeout=TIMEOUT_S))
    try:
        big = os.urandom(3 << 20)                       # several socket writes' worth
        assert await r.set("k", big) and await r.get("k") == big
        script = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        assert await script(keys=["n"], args=[5]) == 5
        assert await r.echo("x") == b"x"
    finally:
        await r.aclose()


async def test_a_write_that_cannot_finish_times_out(redis, conn):
    os.kill(redis.proc.pid, signal.SIGSTOP)
    t = time.monotonic()
    with pytest.raises(RedisTimeoutError, match="Timeout writing to socket"):
        # more than the socket buffers hold: the write has to wait for a reader that never comes
        await conn.send_command("SET", "k", b"x" * (16 << 20))
    assert TIMEOUT_S * 0.9 <= time.monotonic() - t < TIMEOUT_S + 3
    assert not conn.is_connected                        # a half-written command leaves no connection behind


async def test_a_read_without_an_answer_times_out(redis, conn):
    os.kill(redis.proc.pid, signal.SIGSTOP)
    t = time.monotonic()
    await conn.send_command("PING")                     # fits the socket buffer: the write itself finishes
    with pytest.raises(RedisTimeoutError, match="Timeout reading"):
        await conn.read_response()
    assert TIMEOUT_S * 0.9 <= time.monotonic() - t < TIMEOUT_S + 3
    assert not conn.is_connected


def test_commands_are_packed_in_c_to_the_same_bytes_as_redis_py():
    """hiredis's packer is used only where its bytes equal redis-py's own packer's; floats, bools, memoryviews and
    multi-word command names keep redis-py's encoding."""
    from redis.asyncio.connection import Connection

    from service.store.redis_client import _c_pack

    client = timeout_writes_in_task(Redis.from_url("redis://127.0.0.1:1/0"))
    fast, plain = client.connection_pool.make_connection(), Connection()
    state = '{"belief":{"apple 1":"countertop 1"},"note":"é ü 中"}'
    for args in [("EVALSHA", "a" * 40, 3, "k:{s:1}:state", "k:{s:1}:meta", state, 0, -7, b"\x00\xff" * 5000),
                 ("CONFIG GET", "maxmemory"), (b"CONFIG GET", b"maxmemory"), ("SET", "f", 1.5), ("SET", "b", True),
                 ("SET", "m", memoryview(b"xyz"))]:
        try:
            expected = b"".join(plain.pack_command(*args))
        except Exception as e:                      # redis-py refuses bools: so must the service's client
            with pytest.raises(type(e)):
                fast.pack_command(*args)
            continue
        assert b"".join(bytes(p) for p in fast.pack_command(*args)) == expected, args
    assert _c_pack is not None                       # redis[hiredis] is a dependency: the fast path is the one tested
    assert fast.pack_command("GET", "k") == [_c_pack((b"GET", "k"))]


async def test_the_service_client_is_the_lean_one_and_retries_a_dropped_connection(redis):
    """service_client: LeanRedis over the lean pool (redis-py 8); a command whose connection the server drops while
    the command waits for its reply is sent again on a new connection by the configured Retry, and fails without
    retries. (The drop happens mid-command: a connection dropped while idle in the pool may be noticed at checkout
    and silently replaced, which made an earlier form of this test depend on timing.)"""
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError

    from service.store.redis_client import LEAN, LeanRedis, service_client

    async def dropped(retries: int, key: str):
        r = service_client(redis.url, socket_timeout=TIMEOUT_S, retry=Retry(NoBackoff(), retries),
                           retry_on_error=[RedisConnectionError, RedisTimeoutError])
        assert isinstance(r, LeanRedis) == LEAN and LEAN        # the test env has redis-py 8: the lean path is tested
        killer = Redis.from_url(redis.url)

        async def drop_then_push():
            while not [c for c in await killer.client_list() if c.get("cmd") == "blpop"]:
                await asyncio.sleep(0.005)                       # r's BLPOP is blocked on the server
            assert await killer.client_kill_filter(_type="normal", skipme=True) >= 1   # drops it mid-command
            await killer.rpush(key, "v")                         # what a resent BLPOP then returns

        pusher = asyncio.create_task(drop_then_push())
        try:
            return tuple(await r.blpop([key], timeout=0))
        finally:
            await pusher
            await killer.aclose()
            await r.aclose()

    assert await dropped(retries=2, key="q1") == (b"q1", b"v")
    with pytest.raises(RedisConnectionError):
        await dropped(retries=0, key="q0")


async def test_the_service_client_runs_scripts_pipelines_and_big_values(redis):
    from service.store.redis_client import service_client

    r = service_client(redis.url, socket_timeout=TIMEOUT_S)
    try:
        big = os.urandom(3 << 20)
        assert await r.set("k", big) and await r.get("k") == big
        script = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        assert await script(keys=["n"], args=[5]) == 5
        await r.script_flush()                                     # NOSCRIPT: the script is loaded again
        assert await script(keys=["n"], args=[1]) == 6
        async with r.pipeline(transaction=True) as p:
            assert await p.incr("n").get("n").execute() == [7, b"7"]
        pool = r.connection_pool
        assert not pool._in_use_connections and pool._available_connections  # every connection given back
    finally:
        await r.aclose()
