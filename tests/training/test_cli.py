"""Every training stage's command line is built from its settings dataclass (training/cli.py): each setting has help,
`--help` lists it, the command its docstring starts with parses, and `--config` files are read strictly."""

from __future__ import annotations

import dataclasses
import importlib
import re
import shlex
import typing

import pytest

from training import cli

STAGES = ["training.envs.alfworld.generate", "training.teacher", "training.model_init", "training.sft",
          "training.grpo", "training.export", "training.evaluate", "training.dagger", "training.card",
          "training.pipeline"]


def settings_class(module) -> type:
    return typing.get_type_hints(module.parse_args)["return"]


def all_fields(cls: type) -> list[dataclasses.Field]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        out += all_fields(hints[f.name]) if dataclasses.is_dataclass(hints[f.name]) else [f]
    return out


@pytest.mark.parametrize("name", STAGES)
def test_every_setting_has_help_and_a_flag(name, capsys):
    module = importlib.import_module(name)
    fields = all_fields(settings_class(module))
    assert fields and all(f.metadata.get("help") for f in fields), [f.name for f in fields
                                                                    if not f.metadata.get("help")]
    with pytest.raises(SystemExit) as done:
        module.parse_args(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for f in fields:
        assert f"--{f.name.replace('_', '-')}" in text or f"--{f.name}" in text, f.name
    assert "--config" in text


@pytest.mark.parametrize("name", STAGES)
def test_the_docstring_starts_with_a_command_that_parses(name):
    module = importlib.import_module(name)
    first = module.__doc__.splitlines()[0]
    words = shlex.split(re.sub(r"\[[^\]]*\]", "", first))   # optional parts in brackets are left out
    assert words[:3] == ["python", "-m", name], first
    assert isinstance(module.parse_args(words[3:]), settings_class(module))


def test_config_file_with_an_unknown_setting_is_refused(tmp_path, capsys):
    from training.sft import parse_args

    (tmp_path / "sft.json").write_text('{"max_steps": 3, "max_stepz": 4}')
    with pytest.raises(SystemExit) as done:
        parse_args(["--config", str(tmp_path / "sft.json")])
    assert done.value.code == 2 and "unknown setting(s) max_stepz" in capsys.readouterr().err


def test_config_values_are_checked_against_choices(tmp_path, capsys):
    from training.teacher import parse_args

    (tmp_path / "teacher.json").write_text('{"expert": "oracle"}')
    with pytest.raises(SystemExit):
        parse_args(["--config", str(tmp_path / "teacher.json")])
    assert "expert 'oracle' is not one of" in capsys.readouterr().err


def test_config_supplies_required_settings_and_old_flag_spellings_still_work(tmp_path):
    from training.evaluate import EvalConfig, parse_args

    path = cli.write_config(EvalConfig(model="m", split=["fixtures"], n=3), tmp_path / "eval.json")
    assert parse_args(["--config", str(path)]) == EvalConfig(model="m", split=["fixtures"], n=3)
    cfg = parse_args(["--config", str(path), "--kv-cache-gib", "0.1", "--eager", "--mode", "inline", "always_on"])
    assert (cfg.kv_cache_gib, cfg.eager, cfg.mode, cfg.n) == (0.1, True, ["inline", "always_on"], 3)


def test_dict_settings_take_json_on_the_command_line():
    from training.sft import SFTRunConfig, parse_args

    assert parse_args(["--modes", '{"inline": 1.0}', "--lora"]) == SFTRunConfig(modes={"inline": 1.0}, lora=True)
    assert parse_args([]) == SFTRunConfig()
