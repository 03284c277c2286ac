"""README's curl walkthrough, run as written against a real `evoharness serve` (embedded Redis, vLLM engine)."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from service.embedded_redis import free_port

README = Path(__file__).resolve().parent.parent / "README.md"


def block(name: str, lang: str = "bash") -> str:
    text = README.read_text()
    found = re.search(rf"<!-- {name}:start -->\s*```{lang}\n(.*?)```\s*<!-- {name}:end -->", text, re.S)
    assert found, f"README lost its {name} block"
    return found.group(1)


def walkthrough() -> str:
    return block("walkthrough")


def test_readme_names_the_two_commands():
    text = README.read_text()
    assert "make serve" in text and "make test" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert "make test" in ci


def test_readme_walkthrough_runs(tmp_path):
    """Like `make serve`: no model given, so the shipped default policy is served."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(EVOHARNESS_ENFORCE_EAGER="1", EVOHARNESS_KV_CACHE_GIB="0.25",
               PYTHONUNBUFFERED="1")
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            raise AssertionError("service not ready in 300 s")
        assert "started a private redis-server" in (tmp_path / "serve.log").read_text()
        out = subprocess.run(["bash", "-euo", "pipefail", "-c", walkthrough()], capture_output=True, text=True,
                             env={**os.environ, "BASE": f"http://127.0.0.1:{port}"}, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        lines = out.stdout.strip().splitlines()
        assert lines[0].startswith("session ") and len(lines[0]) == len("session ") + 32
        assert lines[1] in ["go to countertop 1", "go to fridge 1", "go to sinkbasin 1", "look", "inventory"]
        assert lines[2] == "env"
        assert "'receptacle'" in lines[3]                   # Belief knows the fridge after the first observation
        assert lines[5] == "ended" and lines[6] == "1" and int(lines[7]) > 20

        run_env = {**os.environ, "BASE": f"http://127.0.0.1:{port}"}
        out = subprocess.run([sys.executable, "-c", block("client", "python")], capture_output=True, text=True,
                             env=run_env, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        action, calls, version = out.stdout.strip().rsplit(" ", 2)
        assert action.strip() in ["take pen 1 from desk 1", "go to drawer 1", "look"]
        assert int(version) == 2 + int(calls)             # observe + harness turns + the env turn

        out = subprocess.run(["bash", "-euo", "pipefail", "-c", block("cli")], capture_output=True, text=True,
                             env={**run_env, "EVO": f"{sys.executable} -m service.cli"}, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        cli = out.stdout.strip().splitlines()
        assert '"action"' in out.stdout and cli[-1] == "default" and int(cli[-2]) >= 2
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
