"""Child processes that do not outlive this one.

- `die_with_parent()`: a `preexec_fn` for `subprocess.Popen` (Linux): the child gets SIGTERM when its parent dies,
  however it dies, SIGKILL included (prctl PR_SET_PDEATHSIG).
- `signals_exit(SIGTERM)`: the signal raises SystemExit, so `finally` blocks run. uvicorn catches SIGTERM for its
  graceful shutdown and raises it again once done; with the default handler that ended the process before the
  `finally` that stops the embedded redis-server.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """The preexec_fn, or None off Linux or off the main thread.

    The kernel sends the signal when the *thread* that forked the child ends, not the process: forking from a
    worker thread would kill the child when that thread ends, so only the main thread's children get it.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
    parent = os.getpid()

    def preexec() -> None:
        if prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent died before prctl: no signal will come
            os._exit(1)

    return preexec


@contextmanager
def signals_exit(*signals: int) -> Iterator[None]:
    """Inside the block these signals raise SystemExit(128 + signal), the shell's exit status for them."""

    def handler(signum: int, _frame) -> None:
        raise SystemExit(128 + signum)

    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
