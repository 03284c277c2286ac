"""Admission of steps to the policy on one replica: at most `limit` run at once, the rest wait in line.

Why a line at all: under a load the CPU cannot keep up with, every admitted step shares it with every other, so a step
takes (steps in flight) / (steps per second) whatever the order. A bounded number in flight keeps each admitted step
short, and the line decides who goes next. That is what lets a session recovering from a dead replica step again
quickly: its retry is served *ahead* of the sessions that were never interrupted (`urgent`), instead of behind all
of them (docs/reliability.md, "Failover").

Which steps are urgent is the caller's choice; `SessionService` marks a step urgent when this replica recently
answered its session 409 `Step in progress` (the retry of a step whose holder died, or a client that had to wait).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time

from service import metrics


class AdmissionTimeout(Exception):
    """A step waited longer than it may for a free slot (answered 503 with Retry-After)."""


class Admission:
    """`async with admission.slot(urgent=...)`: FIFO within each class, urgent first. `limit` 0 admits everything."""

    def __init__(self, limit: int):
        self.limit = limit
        self.running = 0
        self._waiting: dict[bool, collections.deque[asyncio.Future]] = {True: collections.deque(),
                                                                        False: collections.deque()}

    @property
    def waiting(self) -> int:
        return len(self._waiting[True]) + len(self._waiting[False])

    @contextlib.asynccontextmanager
    async def slot(self, urgent: bool = False, timeout_s: float | None = None):
        t0 = time.perf_counter()
        if self.limit and (self.running >= self.limit or self.waiting):
            fut = asyncio.get_running_loop().create_future()
            line = self._waiting[urgent]
            line.append(fut)
            metrics.ADMISSION_WAITING.set(self.waiting)
            try:
                async with asyncio.timeout(timeout_s):
                    await fut          # resolved by _release with the slot already counted as ours
            except BaseException as e:
                self._give_up(line, fut)
                if isinstance(e, TimeoutError):
                    raise AdmissionTimeout(f"no free step slot within {timeout_s:g} s") from None
                raise
            metrics.ADMISSION_WAITING.set(self.waiting)
        else:
            self.running += 1
        metrics.child(metrics.ADMISSION_WAIT, "urgent" if urgent else "normal").observe(time.perf_counter() - t0)
        metrics.ADMISSION_RUNNING.set(self.running)
        try:
            yield
        finally:
            self._release()

    def _give_up(self, line: collections.deque, fut: asyncio.Future) -> None:
        if fut in line:
            line.remove(fut)
        elif fut.done() and not fut.cancelled():
            self._release()            # the slot was handed to us as we gave up: pass it on
        metrics.ADMISSION_WAITING.set(self.waiting)

    def _release(self) -> None:
        """Give the slot to the first waiter (urgent first), or free it."""
        for line in (self._waiting[True], self._waiting[False]):
            while line:
                fut = line.popleft()
                if not fut.done():
                    fut.set_result(None)   # the slot passes on: `running` stays the same
                    metrics.ADMISSION_WAITING.set(self.waiting)
                    return
        self.running -= 1
        metrics.ADMISSION_RUNNING.set(self.running)


class RecentlyBusy:
    """Session ids this replica answered 409 `Step in progress` within the last `ttl_s` (at most `size` kept)."""

    def __init__(self, ttl_s: float = 30.0, size: int = 10_000):
        self.ttl_s, self.size = ttl_s, size
        self._seen: collections.OrderedDict[str, float] = collections.OrderedDict()

    def mark(self, sid: str) -> None:
        self._seen[sid] = time.monotonic()
        self._seen.move_to_end(sid)
        while len(self._seen) > self.size:
            self._seen.popitem(last=False)

    def pop(self, sid: str) -> bool:
        """True (and forgotten) if `sid` was refused as busy within `ttl_s`."""
        t = self._seen.pop(sid, None)
        return t is not None and time.monotonic() - t <= self.ttl_s
