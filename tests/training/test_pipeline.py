"""The pipeline's stage commands: each stage runs as `python -m <module> --config <work>/configs/<stage>.json`, and
that file, read by the stage's own parser, holds the settings the pipeline means."""

from __future__ import annotations

import importlib
import json
from dataclasses import asdict
from pathlib import Path

from training import pipeline


def run_recorded(cfg: pipeline.PipelineConfig, monkeypatch, force: bool = True) -> list[tuple[str, str, dict]]:
    """Run the pipeline with the stage commands recorded instead of run: (module, config file name, settings as the
    stage's parser reads them from the file)."""
    calls = []
    monkeypatch.setattr(pipeline, "sh", lambda *args: calls.append(args))
    monkeypatch.setattr(pipeline, "sh_parallel", lambda commands: calls.extend(map(tuple, commands)))
    pipeline.run(cfg, force=force)
    out = []
    for module, flag, path in calls:
        assert flag == "--config" and Path(path).parent == Path(cfg.work) / "configs", (module, flag, path)
        parsed = importlib.import_module(module).parse_args(["--config", path])  # the stage's own parser
        written = json.loads(Path(path).read_text())
        assert json.loads(json.dumps(asdict(parsed), default=str)) == written
        out.append((module, Path(path).name, written))
    return out


def test_every_stage_runs_from_a_config_file_its_module_reads(tmp_path, monkeypatch):
    cfg = pipeline.PipelineConfig(work=str(tmp_path / "work"), teacher_out=str(tmp_path / "teacher"),
                                  out=str(tmp_path / "policy"), base="micro", grpo_updates=2)
    calls = run_recorded(cfg, monkeypatch)
    modules = [m for m, _, _ in calls]
    assert modules[:3] == ["training.envs.alfworld.generate"] * 3
    for stage in ("training.teacher", "training.model_init", "training.sft", "training.grpo", "training.export",
                  "training.evaluate", "training.card"):
        assert stage in modules, stage
    seen: dict[str, list[dict]] = {}
    for module, _, settings in calls:
        seen.setdefault(module, []).append(settings)
    assert [(g["split"], g["count"], g["verify"]) for g in seen["training.envs.alfworld.generate"]] == [
        ("train", cfg.train_games, False), ("valid_seen", cfg.valid_seen_games, True), ("valid_unseen", None, True)]
    teacher = seen["training.teacher"]   # sharded collectors, then one render pass over their files
    assert [t["shard"] for t in teacher[:-1]] == [f"{i}/{cfg.teacher_shards}" for i in range(cfg.teacher_shards)]
    assert not any(t["render_only"] for t in teacher[:-1])
    assert teacher[-1]["render_only"] and teacher[-1]["shard"] is None
    assert all(t["out"] == cfg.teacher_out and t["games_dir"] == "data/alfworld/train" for t in teacher)
    (base,) = seen["training.model_init"]
    assert (base["size"], base["corpus"]) == ("micro", [cfg.teacher_out])
    (sft,) = seen["training.sft"]
    assert (sft["lm_steps"], sft["max_steps"]) == (cfg.lm_steps, cfg.sft_steps)
    assert sft["modes"] == cfg.sft_modes
    assert sft["base"] == base["out"] and not sft["lora"]       # a from-scratch base is fine-tuned whole
    (grpo,) = seen["training.grpo"]
    assert (grpo["updates"], grpo["lr"]) == (cfg.grpo_updates, cfg.grpo_lr)
    assert grpo["reward"]["div_anneal_updates"] == cfg.grpo_div_anneal
    assert grpo["reward"]["cost_per_call"] == cfg.grpo_cost_per_call
    (export,) = seen["training.export"]
    assert export["temperature"] == cfg.eval_temperature    # the policy is served as it was evaluated
    assert export["model"] == str(Path(cfg.work) / "sft" / "model")   # no GRPO model on disk: nothing ran here
    evals = seen["training.evaluate"]    # the policy, and the policy in the other modes
    assert [Path(e["out"]).name for e in evals] == ["eval-policy", "eval-policy-modes"]
    assert all(e["max_steps"] == cfg.eval_max_steps for e in evals)
    assert all(e["concurrency"] == e["window"] == cfg.eval_concurrency for e in evals)
    ns = {tuple(e["mode"]): e["n"] for e in evals}
    assert ns[("inline",)] is None and ns[tuple(cfg.eval_other_modes)] == cfg.eval_other_modes_n
    assert seen["training.card"][0]["remarks"] == cfg.remarks     # the committed remarks file exists


def test_pretrained_recipe_trains_lora_and_ships_the_adapter(tmp_path, monkeypatch):
    cfg = pipeline.PipelineConfig(work=str(tmp_path / "work"), teacher_out=str(tmp_path / "teacher"),
                                  out=str(tmp_path / "policy"), stages=["sft", "export"])
    calls = run_recorded(cfg, monkeypatch)
    (sft,) = [s for m, _, s in calls if m == "training.sft"]
    (export,) = [s for m, _, s in calls if m == "training.export"]
    assert sft["lora"] and (sft["lora_r"], sft["lora_from_layer"]) == (cfg.lora_r, cfg.lora_from_layer)
    assert export["base_name"] == cfg.base and export["adapter"].endswith("sft/adapter")
    assert "training.model_init" not in [m for m, _, _ in calls]


def test_a_stage_reads_its_config_file_and_flags_override_it(tmp_path):
    from training import cli
    from training.grpo import GRPORunConfig, parse_args
    from training.reward import RewardConfig

    cfg = GRPORunConfig(model="m", updates=3, reward=RewardConfig(cost_per_call=0.3))
    path = cli.write_config(cfg, tmp_path / "grpo.json")
    assert parse_args(["--config", str(path)]) == cfg
    assert parse_args(["--config", str(path), "--updates", "5", "--cost-per-call", "0.1"]) == GRPORunConfig(
        model="m", updates=5, reward=RewardConfig(cost_per_call=0.1))


def test_dagger_rounds_chain_learner_rollouts_render_and_continued_sft(tmp_path, monkeypatch):
    cfg = pipeline.PipelineConfig(work=str(tmp_path / "work"), teacher_out=str(tmp_path / "teacher"),
                                  out=str(tmp_path / "policy"), stages=["dagger", "export"], dagger_rounds=2)
    calls = run_recorded(cfg, monkeypatch)
    names = [name for _, name, _ in calls]
    assert names == ["dagger-r1-export.json", "dagger-r1-rollouts.json", "dagger-r1-render.json", "dagger-r1-sft.json",
                     "dagger-r2-export.json", "dagger-r2-rollouts.json", "dagger-r2-render.json", "dagger-r2-sft.json",
                     "export.json", "card.json"]
    by_name = {name: s for _, name, s in calls}
    work = Path(cfg.work)
    # round 1 starts from the SFT adapter, round 2 from round 1's; the shipped adapter is round 2's
    assert by_name["dagger-r1-export.json"]["adapter"] == str(work / "sft" / "adapter")
    assert by_name["dagger-r1-sft.json"]["init_adapter"] == str(work / "sft" / "adapter")
    assert by_name["dagger-r2-export.json"]["adapter"] == str(work / "dagger-r1" / "adapter")
    assert by_name["dagger-r2-sft.json"]["init_adapter"] == str(work / "dagger-r1" / "adapter")
    assert by_name["export.json"]["adapter"] == str(work / "dagger-r2" / "adapter")
    # each round plays the learner it just exported, on train games no earlier round played
    r1, r2 = by_name["dagger-r1-rollouts.json"], by_name["dagger-r2-rollouts.json"]
    assert r1["model"] == str(work / "dagger-r1" / "learner") and (r1["skip"], r2["skip"]) == (0, cfg.dagger_games)
    assert (r1["round"], r2["round"], r1["out"]) == (1, 2, cfg.teacher_out)
    assert by_name["dagger-r1-render.json"]["render_only"]
    sft = by_name["dagger-r1-sft.json"]
    assert (sft["max_steps"], sft["lr"], sft["train_from_layer"], sft["sources"], sft["dagger_cap"]) == (
        cfg.dagger_steps, cfg.dagger_lr, cfg.dagger_train_from_layer, cfg.dagger_sources, cfg.dagger_cap)


def test_more_stage_generates_a_second_train_set_and_continues_the_sft_adapter_on_it(tmp_path, monkeypatch):
    cfg = pipeline.PipelineConfig(work=str(tmp_path / "work"), teacher_out=str(tmp_path / "teacher"),
                                  out=str(tmp_path / "policy"), stages=["more", "export"], more_games=7,
                                  more_rounds=1)
    calls = run_recorded(cfg, monkeypatch)
    names = [name for _, name, _ in calls]
    assert names == ["generate-more.json", "teacher-more-shard0of2.json", "teacher-more-shard1of2.json",
                     "teacher-more.json", "more-sft.json", "export.json", "card.json"]
    by_name = {name: s for _, name, s in calls}
    work = Path(cfg.work)
    gen = by_name["generate-more.json"]
    assert (gen["split"], gen["count"], gen["first"], gen["seed"], gen["out"], gen["verify"]) == (
        "train", cfg.more_plan, 7, cfg.more_seed, pipeline.MORE_GAMES, False)   # the expert's wins filter them
    assert by_name["teacher-more.json"]["games_dir"] == f"{pipeline.MORE_GAMES}/train"
    assert by_name["teacher-more.json"]["render_only"]
    assert by_name["teacher-more.json"]["n_games"] == 7   # the round's own games, even when later ones are on disk
    sft = by_name["more-sft.json"]
    assert (sft["init_adapter"], sft["data"], sft["max_steps"], sft["lr"]) == (
        str(work / "sft" / "adapter"), pipeline.MORE_TEACHER, cfg.more_steps, cfg.more_lr)
    export = by_name["export.json"]     # the continued adapter ships, with the bank its recalls were rendered with
    assert export["adapter"] == str(work / "more" / "adapter")
    assert export["bank"] == f"{pipeline.MORE_TEACHER}/bank.json"
    off = run_recorded(pipeline.PipelineConfig(work=str(tmp_path / "w2"), teacher_out=str(tmp_path / "teacher"),
                                               out=str(tmp_path / "p2"), stages=["more", "export"], more_games=0),
                       monkeypatch)
    assert [name for _, name, _ in off] == ["export.json", "card.json"]


def test_a_second_more_round_plays_the_plan_s_next_games_from_the_first_round_s_bank(tmp_path, monkeypatch):
    cfg = pipeline.PipelineConfig(work=str(tmp_path / "work"), teacher_out=str(tmp_path / "teacher"),
                                  out=str(tmp_path / "policy"), stages=["more", "export"], more_games=7,
                                  more_rounds=2, more_replay=False, more_later_lr=None)
    (Path(cfg.work) / "more" / "adapter").mkdir(parents=True)   # round 1 is done
    monkeypatch.chdir(tmp_path)   # the teacher folders are relative: none of them is here
    calls = run_recorded(cfg, monkeypatch, force=False)
    by_name = {name: s for _, name, s in calls}
    assert [name for _, name, _ in calls] == ["generate-more-r2.json", "teacher-more-r2-shard0of2.json",
                                              "teacher-more-r2-shard1of2.json", "teacher-more-r2.json",
                                              "more-r2-sft.json", "export.json", "card.json"]
    assert by_name["generate-more-r2.json"]["first"] == 14
    r2 = pipeline.more_teacher(2)
    for name in ("teacher-more-r2-shard0of2.json", "teacher-more-r2.json"):
        t = by_name[name]
        assert (t["first_game"], t["n_games"], t["initial_bank"], t["out"]) == (
            7, 7, f"{pipeline.MORE_TEACHER}/bank.json", r2)
    work = Path(cfg.work)
    sft = by_name["more-r2-sft.json"]
    assert (sft["init_adapter"], sft["data"], sft["out"]) == (str(work / "more" / "adapter"), r2, str(work / "more-r2"))
    assert (by_name["export.json"]["adapter"], by_name["export.json"]["bank"]) == (
        str(work / "more-r2" / "adapter"), f"{r2}/bank.json")
    assert sft["replay_data"] == [] and sft["lr"] == cfg.more_lr   # round 2 on its own games alone, unless replayed
    cfg.more_replay, cfg.more_later_lr, cfg.work = True, cfg.more_lr / 2, str(tmp_path / "work-replay")
    (Path(cfg.work) / "more" / "adapter").mkdir(parents=True)
    replayed = {name: s for _, name, s in run_recorded(cfg, monkeypatch, force=False)}
    assert replayed["more-r2-sft.json"]["replay_data"] == [pipeline.MORE_TEACHER]
    assert replayed["more-r2-sft.json"]["data"] == r2         # its held-out games stay round 2's last ones
    assert replayed["more-r2-sft.json"]["lr"] == cfg.more_lr / 2


def test_grpo_on_a_pretrained_base_trains_the_adapter_and_keeps_the_one_before_as_the_baseline(tmp_path, monkeypatch):
    cfg = pipeline.PipelineConfig(work=str(tmp_path / "work"), teacher_out=str(tmp_path / "teacher"),
                                  out=str(tmp_path / "policy"), stages=["grpo", "export", "eval"], grpo_updates=3,
                                  grpo_call_credit=0.5, grpo_loss_norm="episode", grpo_lambda_div=0.0,
                                  grpo_concurrency=16, grpo_pg_turns="calls", grpo_cut_after_calls=True,
                                  eval_bank_lag=1)
    calls = run_recorded(cfg, monkeypatch)
    names = [name for _, name, _ in calls]
    assert names[:3] == ["grpo.json", "export-sft.json", "export.json"]
    by_name = {name: s for _, name, s in calls}
    work = Path(cfg.work)
    grpo = by_name["grpo.json"]
    assert [m for m, n, _ in calls if n == "grpo.json"] == ["training.grpo_episodes"]
    assert (grpo["adapter"], grpo["bank"], grpo["updates"], grpo["lr"]) == (
        str(work / "sft" / "adapter"), f"{cfg.teacher_out}/bank.json", 3, cfg.grpo_lr)
    assert grpo["reward"]["cost_per_call"] == cfg.grpo_cost_per_call
    assert (grpo["call_credit"], grpo["loss_norm"], grpo["reward"]["lambda_div_max"], grpo["concurrency"]) == (
        0.5, "episode", 0.0, 16)
    assert (grpo["pg_turns"], grpo["cut_after_calls"]) == ("calls", True)
    assert by_name["export-sft.json"]["adapter"] == str(work / "sft" / "adapter")    # the baseline: before GRPO
    grpo_bank = str(work / "grpo" / "bank.json")
    assert (by_name["export.json"]["adapter"], by_name["export.json"]["bank"]) == (
        str(work / "grpo" / "adapter"), grpo_bank)                                         # what ships: after GRPO
    evals = [s for _, n, s in calls if n.startswith("eval-")]
    assert evals[0]["model"] == str(work / "sft-policy") and evals[1]["model"] == cfg.out
    assert evals[0]["split"] == ["valid_unseen"] and evals[1]["split"] == ["valid_unseen", "valid_seen"]
    assert evals[0]["bank_lag"] == evals[1]["bank_lag"] == cfg.eval_bank_lag
    assert evals[0]["bank"] == str(work / "sft-policy" / "bank.json") and evals[1]["bank"] == grpo_bank


def test_grpo_can_play_fresh_games_that_no_sft_stage_saw(tmp_path, monkeypatch):
    cfg = pipeline.PipelineConfig(work=str(tmp_path / "work"), teacher_out=str(tmp_path / "teacher"),
                                  out=str(tmp_path / "policy"), stages=["grpo"], grpo_games=48, grpo_games_seed=77,
                                  grpo_updates=7)
    by_name = {name: s for _, name, s in run_recorded(cfg, monkeypatch)}
    assert list(by_name) == ["generate-grpo.json", "grpo.json"]
    gen = by_name["generate-grpo.json"]
    assert (gen["split"], gen["count"], gen["seed"], gen["out"], gen["verify"]) == (
        "train", 48, 77, pipeline.GRPO_GAMES, True)
    assert by_name["grpo.json"]["games"] == f"{pipeline.GRPO_GAMES}/train"
    cfg.grpo_games, cfg.work = 0, str(tmp_path / "w2")       # off: the SFT's own train games
    assert [s["games"] for _, n, s in run_recorded(cfg, monkeypatch) if n == "grpo.json"] == ["data/alfworld/train"]


def test_calls_stage_replays_train_games_with_optional_commits_and_continues_the_adapter(tmp_path, monkeypatch):
    cfg = pipeline.PipelineConfig(work=str(tmp_path / "work"), teacher_out=str(tmp_path / "teacher"),
                                  out=str(tmp_path / "policy"), stages=["calls", "grpo", "export"], calls_games=9,
                                  calls_commit_share=0.25, grpo_updates=2, grpo_no_call_share=0.5,
                                  grpo_twin_budget=1, grpo_temperature=0.7)
    calls = run_recorded(cfg, monkeypatch)
    names = [name for _, name, _ in calls]
    assert names[:9] == ["teacher-calls-shard0of2.json", "teacher-calls-shard1of2.json", "teacher-calls.json",
                         "generate-train.json", "teacher-calls-heldout-shard0of2.json",
                         "teacher-calls-heldout-shard1of2.json", "teacher-calls-heldout.json", "calls-sft.json",
                         "grpo.json"]
    by_name = {name: s for _, name, s in calls}
    work = Path(cfg.work)
    for name in names[:3]:   # every shard and the render replay the same games with the same share
        t = by_name[name]
        assert (t["games_dir"], t["n_games"], t["first_game"], t["commit_share"], t["out"]) == (
            "data/alfworld/train", 9, 0, 0.25, pipeline.CALLS_TEACHER)
    assert by_name["generate-train.json"]["count"] == cfg.train_games   # the whole plan, for its last games
    for name in names[4:7]:  # held out: the plan's last games, which the sft stage held out too
        t = by_name[name]
        assert (t["first_game"], t["n_games"], t["commit_share"], t["out"], t["initial_bank"]) == (
            cfg.train_games - cfg.calls_heldout_games, cfg.calls_heldout_games, 0.25, pipeline.CALLS_HELDOUT,
            f"{pipeline.CALLS_TEACHER}/bank.json")
    sft = by_name["calls-sft.json"]
    assert (sft["init_adapter"], sft["data"], sft["holdout_data"], sft["max_steps"], sft["lr"]) == (
        str(work / "sft" / "adapter"), pipeline.CALLS_TEACHER, pipeline.CALLS_HELDOUT, cfg.calls_steps, cfg.calls_lr)
    assert sft["modes"] == {"inline": 1.0, "always_on": 0.0, "env_only": 0.0}
    grpo = by_name["grpo.json"]   # GRPO starts from the continued adapter, with the bank its recalls saw
    assert (grpo["adapter"], grpo["bank"]) == (str(work / "calls" / "adapter"), f"{pipeline.CALLS_TEACHER}/bank.json")
    assert (grpo["no_call_share"], grpo["twin_budget"], grpo["temperature"]) == (0.5, 1, 0.7)
    assert by_name["export-sft.json"]["adapter"] == str(work / "calls" / "adapter")   # the baseline GRPO is judged by
    off = run_recorded(pipeline.PipelineConfig(work=str(tmp_path / "w2"), teacher_out=str(tmp_path / "teacher"),
                                               out=str(tmp_path / "p2"), stages=["calls", "export"]), monkeypatch)
    assert [name for _, name, _ in off] == ["export.json", "card.json"]


def test_a_teacher_with_one_commit_style_per_episode_renders_into_its_own_folder(tmp_path, monkeypatch):
    """teacher_commit_episode_share below 1 reaches every teacher shard, and the default teacher folder moves, so the
    stage never skips because the shipped style's data is on disk; the SFT trains on that folder."""
    cfg = pipeline.PipelineConfig(work=str(tmp_path / "work"), out=str(tmp_path / "policy"),
                                  stages=["teacher", "sft"], teacher_commit_episode_share=0.5)
    assert cfg.teacher_out == "data/teacher-styles0.5"
    calls = run_recorded(cfg, monkeypatch)
    teacher = [s for m, _, s in calls if m == "training.teacher"]
    assert len(teacher) == cfg.teacher_shards + 1
    assert all(t["commit_episode_share"] == 0.5 and t["out"] == cfg.teacher_out for t in teacher)
    (sft,) = [s for m, _, s in calls if m == "training.sft"]
    assert sft["data"] == cfg.teacher_out
    shipped = pipeline.PipelineConfig(work=str(tmp_path / "w2"), teacher_out=str(tmp_path / "t"), stages=["teacher"])
    assert all(t["commit_episode_share"] == 1.0 for m, _, t in run_recorded(shipped, monkeypatch)
               if m == "training.teacher")
