"""Instructions per step of the whole ASGI app in process, counted by valgrind (callgrind): a figure that does not
move with the machine's load, for comparing two versions on a shared or noisy box.

    PYTHONPATH=. .venv/bin/python bench/service_instructions.py [service|echo ...] [--root DIR ...] \\
        [--short 100 --long 600]

Runs bench/service_cpu_asgi.py under `valgrind --tool=callgrind` twice per app and checkout, with --short and with
--long requests (one repeat each, PYTHONHASHSEED=0), and prints (instructions(long) - instructions(short)) /
(long - short): the start-up, imports and warm-up cancel out. Each run takes about a minute (valgrind is ~50x
slower than the program). --root: other checkouts of this repository (git worktrees) to compare in the same run.
Needs valgrind (Debian package `valgrind`). Counted instructions are not time: a cache miss or a system call
counts as little, so use it for the Python-side work of a change, and bench/service_overhead.py for latency.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def instructions(root: Path, which: str, requests: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(root), "EVOHARNESS_AUTH": "off"}
        out = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out", sys.executable,
                              str(root / "bench" / "service_cpu_asgi.py"), which, "--requests", str(requests),
                              "--repeats", "1"], cwd=root, env=env, capture_output=True, text=True, check=True)
    m = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if m is None:
        raise RuntimeError(f"no instruction count from valgrind:\n{out.stderr[-2000:]}")
    return int(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("which", nargs="*", help="service and/or echo (default: both)")
    ap.add_argument("--root", nargs="+", type=Path, default=[ROOT])
    ap.add_argument("--short", type=int, default=100)
    ap.add_argument("--long", type=int, default=600)
    args = ap.parse_args()
    args.which = args.which or ["service", "echo"]
    if not set(args.which) <= {"service", "echo"}:
        ap.error(f"which: service and/or echo, not {args.which}")
    print(f"{'app':<8} {'checkout':<40} {'instructions/step':>18}", flush=True)
    for which in args.which:
        roots = args.root if which == "service" else args.root[:1]
        for root in roots:
            n = ((instructions(root, which, args.long) - instructions(root, which, args.short))
                 / (args.long - args.short))
            print(f"{which:<8} {str(root):<40} {n:>18,.0f}", flush=True)


if __name__ == "__main__":
    main()
