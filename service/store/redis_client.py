"""The async Redis client the service connects with (service.api.app.connect_redis).

On Python 3.11, redis-py bounds every socket write of a connection with a `socket_timeout` by
`asyncio.wait_for(...)`, which there runs the write in a new task: a task, a future, a timer and two extra event
loop turns per command, for a write that in practice never waits (a command goes into the transport's buffer;
`drain()` waits only once that buffer is over its high-water mark). `timeout_writes_in_task` gives the pool a
connection class whose writes keep the same bound with `asyncio.timeout` on the calling task instead (what
`wait_for` itself does from Python 3.12 on). Everything else, including the read timeout, is redis-py's.
"""

from __future__ import annotations

import asyncio
import sys

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

NEEDS_TASKLESS_WRITES = sys.version_info < (3, 12)

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
            async with asyncio.timeout(timeout):
                await self._send_packed_command(command)
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
