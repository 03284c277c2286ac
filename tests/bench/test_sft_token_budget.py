"""bench/sft_token_budget.py: the closed-form episode cost matches bench/roofline.py's per-token count, and on real
teacher data (two fixture games through training.teacher) the table splits the tokens by mode and projects a mix
without always_on episodes as cheaper."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from transformers import AutoConfig

from bench.roofline import flops_per_token
from bench.sft_token_budget import episode_cost, main

os.environ.setdefault("ALFWORLD_DATA", str(Path(__file__).resolve().parents[2] / "data" / "alfworld-home"))


def test_episode_cost_sums_the_per_token_count_over_positions(tiny_model):
    cfg = AutoConfig.from_pretrained(str(tiny_model))
    n, scored = 37, {3, 10, 36}
    by_token = sum(flops_per_token(cfg, pos, with_head=pos in scored) for pos in range(n))
    assert episode_cost(cfg, n, len(scored)) == by_token
    assert episode_cost(cfg, n, len(scored), attention=False) == sum(
        flops_per_token(cfg, 0, with_head=pos in scored) for pos in range(n))


def test_the_table_splits_real_teacher_episodes_by_mode(tiny_model, tmp_path, capsys):
    from training.envs.alfworld.paths import fixture_games
    from training.teacher import TeacherConfig
    from training.teacher import run as teacher

    games = tmp_path / "games"
    for g in (fixture_games()[0], fixture_games()[2], fixture_games()[3]):
        shutil.copytree(g, games / g.name)
    teacher(TeacherConfig(out=str(tmp_path / "teacher"), games_dir=str(games)))
    assert main(["--data", str(tmp_path / "teacher"), "--base", str(tiny_model), "--modes",
                 '{"inline": 1.0, "always_on": 1.0}', "--mix", '{"inline": 1.0}', "--seconds-per-step", "10",
                 "--steps", "60"]) == 0
    out = capsys.readouterr().out
    print(out)
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in out.splitlines() if line.startswith("| ")}
    # three won games, fewer than SFT's 4 held-out games, so none is held out
    assert rows["inline"][1] == rows["always_on"][1] == "3"
    assert int(rows["always_on"][2]) > int(rows["inline"][2])   # the panels are re-shown on every turn
    mixed, inline_only = rows['`{"inline": 1.0, "always_on": 1.0}`'], rows['`{"inline": 1.0}`']
    assert float(mixed[3]) == 10.0 and float(inline_only[3]) < 10.0
    assert inline_only[2] == "inline 100%"
