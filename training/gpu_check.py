"""Short GPU check for the GPU recipe: one SFT step with LoRA, one GRPO update, one served episode (not run here).

    GPU:  python -m training.gpu_check --base /models/Qwen3-1.7B --out runs/gpu-check
    CPU:  python -m training.gpu_check --base models/default-policy --out runs/cpu-check --cpu   (plumbing only)

Prints the device, then times each stage on the committed fixture games; writes ``<out>/gpu_check.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--out", default="runs/gpu-check")
    ap.add_argument("--cpu", action="store_true", help="allow running without CUDA (plumbing check)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available() and not args.cpu:
        raise SystemExit("no CUDA device; pass --cpu for a plumbing-only run")
    from training.envs.alfworld.paths import fixture_games
    from training.grpo import GRPORunConfig
    from training.grpo import run as grpo
    from training.sft import SFTRunConfig
    from training.sft import run as sft
    from training.teacher import TeacherConfig
    from training.teacher import run as teacher

    out = Path(args.out)
    report = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "seconds": {}}
    games = out / "games"
    games.mkdir(parents=True, exist_ok=True)
    import shutil
    for g in fixture_games()[:2]:
        if not (games / g.name).exists():
            shutil.copytree(g, games / g.name)
    stages = {
        "teacher": lambda: teacher(TeacherConfig(out=str(out / "teacher"), games_dir=str(games),
                                                 expert="walkthrough", merge_walkthrough=False)),
        "sft": lambda: sft(SFTRunConfig(base=args.base, data=str(out / "teacher"), out=str(out / "sft"), max_steps=2,
                                        batch=2, holdout_games=1, eval_turns=2, lora=not args.cpu,
                                        bf16=torch.cuda.is_available(), lr=1e-5 if not args.cpu else 1e-3)),
        "grpo": lambda: grpo(GRPORunConfig(model=str(out / "sft" / "model"), games=str(games), out=str(out / "grpo"),
                                           updates=1, games_per_update=1, group=2, max_env_steps=3, bank=None)),
    }
    for name, fn in stages.items():
        t0 = time.perf_counter()
        fn()
        report["seconds"][name] = round(time.perf_counter() - t0, 1)
        print(name, report["seconds"][name], "s", flush=True)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
