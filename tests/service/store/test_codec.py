"""service/store/codec.py: orjson where it can, the json module where orjson refuses; the same values back."""

from __future__ import annotations

import json
import math

import pytest

from service.store import codec

VALUES = [
    {"belief": {"apple 1": {"at": "countertop 1"}}, "n": 3, "f": 0.1, "tiny": 1e-7, "none": None, "ok": True},
    {"text": "café 中 😀", "list": [1, "two", [3.5, {"x": []}]]},
    {"big": 2 ** 70},                       # beyond 64 bits: json's path
    {"s": "x\ud800y"},                      # lone surrogate: json's path, written as an ASCII escape
    {1: "int key"},                         # non-string key: json's path, key written as "1"
    [],
    "plain",
]


@pytest.mark.parametrize("value", VALUES)
def test_round_trip_means_what_json_means(value):
    raw = codec.dumps(value)
    assert isinstance(raw, bytes)
    assert codec.loads(raw) == json.loads(json.dumps(value))     # the same value json would give back
    assert json.loads(raw) == codec.loads(raw)                     # and the bytes are JSON any reader reads
    assert len(raw) <= len(json.dumps(value, separators=(",", ":")).encode())   # never longer than before


def test_non_ascii_is_utf8_and_nonfinite_floats_are_null():
    assert codec.dumps({"t": "é"}) == '{"t":"é"}'.encode()
    assert codec.dumps({"x": math.nan}) == b'{"x":null}'


def test_loads_reads_what_older_versions_wrote():
    assert codec.loads(b'{"x": NaN, "t": "caf\\u00e9"}')["t"] == "café"   # json.dumps's defaults
    assert codec.loads('{"a": 1}') == {"a": 1}
    with pytest.raises(ValueError):
        codec.loads(b'{"broken')
