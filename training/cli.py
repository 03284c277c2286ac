"""Command lines of the training stages, built from each stage's settings dataclass (the one place a setting is
written: name, type, default and help).

    cfg = parse(SFTRunConfig, argv, __doc__)      # in a stage's main(); `python -m training.sft --help` lists them

Every field is a flag (``--max-steps`` or ``--max_steps`` for ``max_steps``; a bool is a switch, ``--x false`` and
``--no-x`` for one that defaults to true), with its help from the field's ``metadata["help"]``; other metadata keys
go to argparse as they are (``choices``, ``aliases``). transformers' ``HfArgumentParser`` builds the parser (TRL's
``TrlParser`` pattern). ``--config stage.json`` reads settings from a JSON object keyed by field name, as
``write_config`` writes it (the pipeline runs every stage that way); flags given beside it override the file. A field
whose type is itself a dataclass (GRPO's ``reward``) is a nested object in the file and flat flags on the command line.
A ``dict`` field takes JSON on the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The module docstring as written, and each flag's default."""


def json_object(text: str) -> dict:
    """argparse type of a ``dict`` field: a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("not a JSON object")
    return value


def _is_dict(tp: Any) -> bool:
    return (typing.get_origin(tp) or tp) is dict


def _flat_fields(cls: type) -> list[tuple[str, Any, dataclasses.Field]]:
    """(name, type, field) of every settable field, nested dataclasses' fields in place of the nested field."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            out += _flat_fields(tp)
            continue
        if _is_dict(tp):
            tp = json_object  # HfArgumentParser passes an unknown type on to argparse as its `type`
        out.append((f.name, tp, dataclasses.field(default=f.default, default_factory=f.default_factory,
                                                  metadata=f.metadata)))
    names = [name for name, _, _ in out]
    if len(set(names)) != len(names):
        raise TypeError(f"{cls.__name__}: a nested dataclass repeats a field name: {sorted(names)}")
    return out


def _flatten(cls: type, values: dict, where: str) -> dict:
    """A config object (nested objects for nested dataclasses) as flat field values; unknown keys are an error."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown setting(s) {', '.join(unknown)} for {cls.__name__}")
    flat = {}
    for name, value in values.items():
        if dataclasses.is_dataclass(fields[name]):
            flat.update(_flatten(fields[name], value, f"{where}: {name}"))
        else:
            flat[name] = value
    return flat


def _build(cls: type[T], flat: dict) -> T:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.init:
            kwargs[f.name] = _build(hints[f.name], flat) if dataclasses.is_dataclass(hints[f.name]) else flat[f.name]
    return cls(**kwargs)


def build_parser(cls: type, doc: str | None = None) -> argparse.ArgumentParser:
    """The stage's parser: one flag per (flattened) field of ``cls``, plus ``--config``."""
    from transformers import HfArgumentParser

    flat = dataclasses.make_dataclass(cls.__name__, _flat_fields(cls), kw_only=True)
    parser = HfArgumentParser(flat, description=doc, formatter_class=_HelpFormatter)
    parser.add_argument("--config", metavar="FILE.json", default=None,
                        help="settings from this JSON file (keys: the names of these settings, with _); flags given "
                             "as well override it")
    return parser


def parse(cls: type[T], argv: list[str] | None = None, doc: str | None = None) -> T:
    """Settings of type ``cls`` from ``argv`` (``sys.argv[1:]`` when None): ``--config FILE`` first, then flags."""
    parser = build_parser(cls, doc)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    config = pre.parse_known_args(argv)[0].config
    if config:
        try:
            values = json.loads(Path(config).read_text())
            if not isinstance(values, dict):
                raise ValueError(f"{config}: not a JSON object")
            values = _flatten(cls, values, config)
        except (OSError, ValueError) as e:
            parser.error(str(e))
        for action in parser._actions:  # the file's values become the defaults, so flags still override them
            if action.dest in values:
                if action.choices is not None and values[action.dest] not in action.choices:
                    parser.error(f"{config}: {action.dest} {values[action.dest]!r} is not one of "
                                 f"{', '.join(map(str, action.choices))}")
                action.default, action.required = values[action.dest], False
    ns = vars(parser.parse_args(argv))
    ns.pop("config")
    return _build(cls, ns)


def write_config(cfg: Any, path: str | Path) -> Path:
    """``cfg`` (a settings dataclass) as the JSON file ``--config`` reads."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dataclasses.asdict(cfg), indent=1, default=str) + "\n")
    return path
