"""Per-key request rate limit kept in Redis, so every replica counts against the same budget.

Fixed window: the first request of a key opens a window of `window_s` seconds (INCR + PEXPIRE in one Lua script,
so a crash between the two cannot leave a counter without expiry); the (limit+1)-th request inside the window is
refused with 429 and Retry-After = the seconds left in the window. One key per API key; no hash tag needed
(a single-key script runs on Redis Cluster).

`COUNT_LUA` is the counting step on its own: the step route runs it inside the session's begin script
(service/store/docs.py), so a step pays one Redis round trip for the count and the lease together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Lua: count one request on key `rk` in a window of `window` ms; leaves the count in `rn`, the ms left in `rttl`.
COUNT_LUA = r"""
local rn = redis.call('INCR', rk)
local rttl = redis.call('PTTL', rk)
if rn == 1 or rttl < 0 then
  redis.call('PEXPIRE', rk, window)
  rttl = window
end
"""

_HIT = "local rk, window = KEYS[1], tonumber(ARGV[1])\n" + COUNT_LUA + "return {rn, rttl}\n"


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    count: int
    limit: int
    retry_after_s: int


class RateLimiter:
    def __init__(self, redis, namespace: str, limit: int, window_s: float):
        self.limit, self.window_s, self.window_ms = limit, window_s, int(window_s * 1000)
        self.prefix = f"{namespace}:ratelimit:"
        self._hit = redis.register_script(_HIT)

    def key(self, key_id: str) -> str:
        return self.prefix + key_id

    def verdict(self, count, ttl_ms) -> Verdict:
        n, ttl_ms = int(count), int(ttl_ms)
        return Verdict(n <= self.limit, n, self.limit, max(1, math.ceil(ttl_ms / 1000)))

    async def hit(self, key_id: str) -> Verdict:
        n, ttl_ms = await self._hit(keys=[self.key(key_id)], args=[self.window_ms])
        return self.verdict(n, ttl_ms)
