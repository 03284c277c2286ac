"""The async Redis client the service connects with (service.api.app.connect_redis): redis-py's, with the
per-command path made shorter where that changes nothing the service relies on.

- `LeanRedis.execute_command` and the pool's `get_connection` / `release` do what redis-py 8.1 does (the same
  connection pool, the same `Retry` with the same reconnect between attempts, the same reply parsing) minus its
  OpenTelemetry recorder calls: redis-py awaits six of them per command (`record_operation_duration`, four
  `record_connection_count`, ...) and each returns at once unless `redis.observability` is set up, which the
  service never does. The pool's `get_connection` also skips a deprecated-arguments wrapper. Only on redis-py 8.x,
  whose internals these follow (`LEAN`); elsewhere the stock classes. Not on Redis Cluster (its own client).
- Commands are packed by hiredis's C packer where its bytes equal redis-py's (`_PackInC`).
- On Python 3.11, redis-py bounds every socket write of a connection with a `socket_timeout` by
  `asyncio.wait_for(...)`, which there runs the write in a new task: a task, a future, a timer and two extra event
  loop turns per command, for a write that in practice never waits (a command goes into the transport's buffer;
  `drain()` waits only once that buffer is over its high-water mark). `timeout_writes_in_task` gives the pool a
  connection class whose writes keep the same bound with `asyncio.timeout` on the calling task instead (what
  `wait_for` itself does from Python 3.12 on), set only when bytes are left in the buffer (otherwise `drain()`
  returns at once). Everything else, including the read timeout, is redis-py's.
"""

from __future__ import annotations

import asyncio
import sys

import redis
from redis.asyncio import Redis
from redis.asyncio.connection import ConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

NEEDS_TASKLESS_WRITES = sys.version_info < (3, 12)
LEAN = redis.__version__.split(".")[0] == "8"
if LEAN:
    from redis.event import AsyncAfterConnectionReleasedEvent

try:
    from hiredis import pack_command as _c_pack
except ImportError:  # hiredis is a dependency (redis[hiredis]); without it redis-py's packer is used
    _c_pack = None

_C_PACKABLE = (str, bytes, int)  # exact types: bool (an int) and str/int subclasses take redis-py's path


class _PackInC:
    """Mixin over a redis.asyncio connection class: `pack_command` by hiredis when it gives the same bytes."""

    def pack_command(self, *args):
        if _c_pack is None or self.encoder.encoding.lower() not in ("utf-8", "utf8") or \
                self.encoder.encoding_errors != "strict" or any(type(a) not in _C_PACKABLE for a in args):
            return super().pack_command(*args)
        first = args[0]  # redis-py sends a multi-word command name ("CONFIG GET") as separate arguments
        if isinstance(first, str):
            args = tuple(first.encode().split()) + args[1:]
        elif b" " in first:
            args = tuple(first.split()) + args[1:]
        return [_c_pack(args)]


class _WriteTimeoutInTask:
    """Mixin over a redis.asyncio connection class: `send_packed_command` as redis-py's (8.1), with the
    write bounded by `asyncio.timeout(socket_timeout)` on this task rather than `asyncio.wait_for`. Same errors:
    redis TimeoutError("Timeout writing to socket") past the timeout, ConnectionError on an OSError, and the
    connection dropped on any failure (a half-written command must not be followed by another)."""

    async def send_packed_command(self, command, check_health: bool = True) -> None:
        timeout = self.socket_timeout
        if not timeout or not self.is_connected:  # (re)connecting: redis-py's own path
            return await super().send_packed_command(command, check_health)
        if check_health:
            await self.check_health()
        try:
            if isinstance(command, str):
                command = command.encode()
            if isinstance(command, bytes):
                command = [command]
            writer = self._writer
            writer.writelines(command)  # into the transport: sent now, or buffered; never waits
            if writer.transport.get_write_buffer_size():  # drain() may wait only with bytes still buffered
                async with asyncio.timeout(timeout):
                    await writer.drain()
            else:
                await writer.drain()  # returns at once (raises if the connection was lost)
        except TimeoutError:  # asyncio's, the builtin: before OSError, of which it is a subclass
            await self.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        except OSError as e:
            await self.disconnect(nowait=True)
            if len(e.args) == 1:
                err_no, errmsg = "UNKNOWN", e.args[0]
            else:
                err_no, errmsg = e.args[0], e.args[1]
            raise RedisConnectionError(f"Error {err_no} while writing to socket. {errmsg}.") from e
        except BaseException:
            await self.disconnect(nowait=True)
            raise


def timeout_writes_in_task(client):
    """`client` (a redis.asyncio.Redis built from a URL, not yet connected) with the pool's connection class
    (plain, TLS or unix socket, as the URL chose) packing commands in C and writing under `asyncio.timeout`
    (the latter only on Python < 3.12, where `wait_for` does not already work that way)."""
    pool = client.connection_pool
    base = pool.connection_class
    mixins = tuple(m for m in ((_PackInC,) + ((_WriteTimeoutInTask,) if NEEDS_TASKLESS_WRITES else ()))
                   if not issubclass(base, m))
    if mixins:
        pool.connection_class = type(base.__name__, (*mixins, base), {"__module__": __name__})
    return client



class _LeanPool:
    """Mixin over redis.asyncio's ConnectionPool: `get_connection` and `release` as redis-py 8.1's, without the
    observability recorder calls (see the module docstring). The release event is still dispatched (credential
    providers listen to it)."""

    async def get_connection(self, command_name=None, *keys, **options):
        async with self._lock:
            connection = self.get_available_connection()
        try:
            await self.ensure_connection(connection)
            return connection
        except BaseException:
            await self.release(connection)
            raise

    async def release(self, connection) -> None:
        async with self._lock:
            self._in_use_connections.remove(connection)
            if connection.should_reconnect():
                await connection.disconnect()
            self._available_connections.append(connection)
        await self._event_dispatcher.dispatch_async(AsyncAfterConnectionReleasedEvent(connection))


class LeanRedis(Redis):
    """redis.asyncio.Redis whose `execute_command` is redis-py 8.1's without the observability recorder calls:
    a connection from the pool, the command sent and its reply parsed under the connection's `Retry` (the
    connection dropped before each new attempt), the connection given back."""

    async def execute_command(self, *args, **options):
        if self.single_connection_client or args[0] in ("HIMPORT", "HIMPORT SET"):
            return await super().execute_command(*args, **options)
        pool = self.connection_pool
        conn = await pool.get_connection()
        name = args[0]
        try:
            return await conn.retry.call_with_retry(
                lambda: self._send_and_parse(conn, name, args, options),
                lambda error, failure_count: conn.disconnect(error=error, failure_count=failure_count),
                with_failure_count=True)
        finally:
            await pool.release(conn)

    async def _send_and_parse(self, conn, name, args, options):
        await conn.send_command(*args)
        return await self.parse_response(conn, name, **options)


def service_client(url: str, **kw) -> Redis:
    """The service's client for `url` (no Redis Cluster): `LeanRedis` over a lean pool on redis-py 8, packing in C,
    with task-less write timeouts on Python 3.11; `kw` as for `Redis.from_url`."""
    if not LEAN:
        return timeout_writes_in_task(Redis.from_url(url, **kw))
    pool_cls = type("ConnectionPool", (_LeanPool, ConnectionPool), {"__module__": __name__})
    client = LeanRedis(connection_pool=pool_cls.from_url(url, **kw))
    client.auto_close_connection_pool = True  # as Redis.from_url: closing the client closes its pool
    return timeout_writes_in_task(client)
