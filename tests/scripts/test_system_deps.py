"""scripts/system_deps.sh, run for real on a PATH made for each test: a folder holding the tools the script looks for.

The script only asks whether each tool is on PATH (it never runs them), so an empty executable file is a present
tool and leaving one out is a machine without it. EVOHARNESS_NO_INSTALL=1 keeps it from calling apt-get when the
tests run as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "system_deps.sh"
BASH = shutil.which("bash")
TEST_TOOLS = ["redis-server", "redis-cli", "chromium", "cmake", "g++", "prometheus", "promtool"]


def run(tmp_path: Path, tools: list[str], profile: str = "test", **env: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for tool in tools:
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    return subprocess.run([BASH, str(SCRIPT), profile], check=False, capture_output=True, text=True, timeout=30,
                          env={"PATH": str(bin_dir), "EVOHARNESS_NO_INSTALL": "1", **env})


def test_everything_present_exits_0_quietly(tmp_path):
    out = run(tmp_path, TEST_TOOLS)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")


@pytest.mark.parametrize("tool, package", [("chromium", "chromium"), ("redis-cli", "redis-tools"),
                                           ("promtool", "prometheus"), ("g++", "build-essential")])
def test_a_missing_tool_stops_with_one_line_naming_it_and_its_install_command(tmp_path, tool, package):
    out = run(tmp_path, [t for t in TEST_TOOLS if t != tool])
    assert out.returncode == 1
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"missing: {tool} — install with: ")
    assert f"apt-get install -y {package}" in lines[0]


def test_tools_of_one_package_name_it_once(tmp_path):
    out = run(tmp_path, [t for t in TEST_TOOLS if t not in ("prometheus", "promtool", "chromium")])
    assert out.returncode == 1
    missing, command = out.stderr.strip().split(" — install with: ")
    assert missing == "missing: chromium prometheus promtool"
    assert command.split("apt-get install -y ")[1].split(" (")[0] == "chromium prometheus"


def test_serve_needs_redis_server_only_without_redis_url(tmp_path):
    out = run(tmp_path, ["cmake", "g++"], profile="serve")
    assert out.returncode == 1 and out.stderr.startswith("missing: redis-server — "), out.stderr
    out = run(tmp_path / "with-url", ["cmake", "g++"], profile="serve", REDIS_URL="redis://127.0.0.1:6379/0")
    assert (out.returncode, out.stderr) == (0, "")


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("target", ["test", "serve"])
def test_make_runs_the_check_before_anything_else(target):
    dry = subprocess.run(["make", "--no-print-directory", "-n", target], check=False, cwd=ROOT, capture_output=True,
                         text=True, timeout=30, env={**os.environ, "MAKEFLAGS": "", "MAKELEVEL": ""})
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == f"scripts/system_deps.sh {target}"


def test_ci_only_runs_the_readme_test_command():
    commands = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert commands[-1] == "exec make test"
    assert not any("apt-get" in c for c in commands)
