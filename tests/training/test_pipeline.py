"""The pipeline's stage commands: every flag it passes must be one its stage module accepts."""

from __future__ import annotations

import argparse
import importlib

import pytest

from training import pipeline


class _Parsed(Exception):
    def __init__(self, namespace):
        self.namespace = namespace


def test_every_stage_command_parses_in_its_module(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(pipeline, "sh", lambda *args: calls.append(args))
    monkeypatch.setattr(pipeline, "sh_parallel", lambda commands: calls.extend(map(tuple, commands)))
    cfg = pipeline.PipelineConfig(work=str(tmp_path / "work"), teacher_out=str(tmp_path / "teacher"),
                                  out=str(tmp_path / "policy"), base="micro", grpo_updates=2)
    pipeline.run(cfg, force=True)
    modules = [c[0] for c in calls]
    assert modules[:3] == ["training.envs.alfworld.generate"] * 3
    for stage in ("training.teacher", "training.model_init", "training.sft", "training.grpo", "training.export",
                  "training.evaluate", "training.card"):
        assert stage in modules, stage

    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    seen = {}
    for module, *args in calls:
        with pytest.raises(_Parsed) as parsed:
            importlib.import_module(module).main(list(args))
        seen.setdefault(module, []).append(vars(parsed.value.namespace))
    teacher = seen["training.teacher"]   # sharded collectors, then one render pass over their files
    assert [t["shard"] for t in teacher[:-1]] == [f"{i}/{cfg.teacher_shards}" for i in range(cfg.teacher_shards)]
    assert teacher[-1]["render_only"] and teacher[-1]["shard"] is None
    sft = seen["training.sft"][0]
    assert (sft["lm_steps"], sft["max_steps"]) == (cfg.lm_steps, cfg.sft_steps)
    assert seen["training.grpo"][0]["div_anneal_updates"] == cfg.grpo_div_anneal
    assert seen["training.export"][0]["temperature"] == cfg.eval_temperature
    assert all(e["max_steps"] == cfg.eval_max_steps for e in seen["training.evaluate"])
    ns = {tuple(e["mode"]): e["n"] for e in seen["training.evaluate"]}
    assert ns[("inline",)] is None and ns[tuple(cfg.eval_other_modes)] == cfg.eval_other_modes_n
    assert sft["modes"] == cfg.sft_modes
    assert seen["training.card"][0]["remarks"] == cfg.remarks     # the committed remarks file exists


def test_pretrained_recipe_trains_lora_and_ships_the_adapter(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(pipeline, "sh", lambda *args: calls.append(args))
    monkeypatch.setattr(pipeline, "sh_parallel", lambda commands: calls.extend(map(tuple, commands)))
    cfg = pipeline.PipelineConfig(work=str(tmp_path / "work"), teacher_out=str(tmp_path / "teacher"),
                                  out=str(tmp_path / "policy"), stages=["sft", "export"])
    pipeline.run(cfg, force=True)
    (sft,) = [c for c in calls if c[0] == "training.sft"]
    (export,) = [c for c in calls if c[0] == "training.export"]
    assert "--lora" in sft and sft[sft.index("--lora-from-layer") + 1] == str(cfg.lora_from_layer)
    assert export[export.index("--base-name") + 1] == cfg.base
    assert "training.model_init" not in [c[0] for c in calls]
