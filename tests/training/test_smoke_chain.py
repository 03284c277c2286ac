"""Smoke chain: fixture games -> teacher -> base model -> SFT -> GRPO -> export -> one episode served by vLLM.

Every stage runs for real at toy size (2 games, a sub-million-parameter model, a few steps), so the whole chain fits
in a few minutes on 2 CPU cores.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("ALFWORLD_DATA", str(Path(__file__).resolve().parents[2] / "data" / "alfworld-home"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytestmark = pytest.mark.timeout(1500)


def test_generate_teacher_sft_grpo_export_serve(tmp_path):
    from training.envs.alfworld.paths import fixture_games
    from training.export import export, model_card
    from training.grpo import GRPORunConfig
    from training.grpo import run as grpo
    from training.model_init import BaseModelConfig, build_from_scratch
    from training.sft import SFTRunConfig
    from training.sft import run as sft
    from training.teacher import TeacherConfig
    from training.teacher import run as teacher

    games = fixture_games()
    gdir = tmp_path / "games"
    gdir.mkdir()
    for g in (games[0], games[6]):
        shutil.copytree(g, gdir / g.name)

    stats = teacher(TeacherConfig(out=str(tmp_path / "teacher"), games_dir=str(gdir), expert="walkthrough",
                                  merge_walkthrough=False))
    assert stats["modes"]["inline"]["turns"] > stats["modes"]["env_only"]["turns"] > 0
    rows = [json.loads(line) for line in (tmp_path / "teacher" / "inline.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "harness" for r in rows)

    base = build_from_scratch(BaseModelConfig(size="pico", corpus=[str(tmp_path / "teacher")], vocab_size=1024),
                              tmp_path / "base")
    report = sft(SFTRunConfig(base=str(base), data=str(tmp_path / "teacher"), out=str(tmp_path / "sft"),
                              max_steps=2, batch=2, holdout_games=1, eval_turns=2, max_length=700))
    assert report["constrained_eval"]["turns"] == 2          # grammar-constrained decoding parsed every turn
    log = grpo(GRPORunConfig(model=str(tmp_path / "sft" / "model"), games=str(gdir), out=str(tmp_path / "grpo"),
                             updates=1, games_per_update=1, group=2, max_env_steps=2, bank=None))
    assert len(log) == 1 and {"reward", "success", "harness_calls_per_episode", "tokens_per_episode"} <= set(log[0])
    assert (tmp_path / "grpo" / "grpo_curves.png").exists()

    dest = export(str(tmp_path / "grpo" / "model"), str(tmp_path / "policy"))
    model_card(dest, 1, {"Training": "smoke"})
    assert (dest / "model.safetensors").exists() and (dest / "MODEL_CARD.md").exists()

    from service.policy.engines.vllm_local import VLLMEngine
    from training.agent import EnginePolicy
    from training.envs.alfworld.driver import play_games

    engine = VLLMEngine(dest, max_model_len=2048, kv_cache_gib=0.1, enforce_eager=True)
    policy = EnginePolicy(engine, mode="inline")
    try:
        (result,) = play_games([games[0]], policy, max_steps=3)
    finally:
        policy.close()
    assert result["steps"] == 3 or result["won"]
    assert result["prompt_tokens"] > 0 and result["completion_tokens"] > 0
