"""Per-key request rate limit kept in Redis, so every replica counts against the same budget.

Fixed window: the first request of a key opens a window of `window_s` seconds (INCR + PEXPIRE in one Lua script,
so a crash between the two cannot leave a counter without expiry); the (limit+1)-th request inside the window is
refused with 429 and Retry-After = the seconds left in the window. One key per API key; no hash tag needed
(a single-key script runs on Redis Cluster).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_HIT = r"""
local n = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if n == 1 or ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {n, ttl}
"""


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    count: int
    limit: int
    retry_after_s: int


class RateLimiter:
    def __init__(self, redis, namespace: str, limit: int, window_s: float):
        self.limit, self.window_ms = limit, int(window_s * 1000)
        self.prefix = f"{namespace}:ratelimit:"
        self._hit = redis.register_script(_HIT)

    async def hit(self, key_id: str) -> Verdict:
        n, ttl_ms = await self._hit(keys=[self.prefix + key_id], args=[self.window_ms])
        n, ttl_ms = int(n), int(ttl_ms)
        return Verdict(n <= self.limit, n, self.limit, max(1, math.ceil(ttl_ms / 1000)))
