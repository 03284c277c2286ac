"""A private `redis-server` child process: the embedded default when no REDIS_URL is given.

Used by `evoharness serve` and by the test fixtures. Needs `redis-server` on PATH. Started from the main thread
on Linux, the child gets SIGTERM when this process dies, even by SIGKILL (service/lifetime.py).
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time

from service.lifetime import die_with_parent


def free_port() -> int:
    """A free loopback port outside the kernel's ephemeral range.

    A port the kernel hands out (bind to 0) is released before the server binds it, and a slow
    starter (vLLM takes ~30 s) can lose it to any outgoing connection meanwhile; ports below the
    ephemeral range (32768-60999 on Linux) are never handed out that way.
    """
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32000")


class EmbeddedRedis:
    def __init__(self, port: int | None = None, *, appendonly: bool = False, dir: str | None = None):
        self.port = port or free_port()
        self.appendonly = appendonly
        self.dir = dir or tempfile.mkdtemp(prefix="evoharness-redis-")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server not found on PATH: install Redis (Debian: apt-get install redis-server) "
                               "or set REDIS_URL")
        args = [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--save", "",
                "--appendonly", "yes" if self.appendonly else "no", "--protected-mode", "yes"]
        # preexec_fn only calls prctl (looked up before the fork) and getppid: nothing that takes a lock
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=die_with_parent())  # noqa: PLW1509
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not answer in time")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def restart(self) -> None:
        """Stop and start again on the same port and dir (keeps data only with appendonly)."""
        self.stop()
        self.start()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
