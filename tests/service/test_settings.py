"""Settings: sampling defaults come from the policy folder unless set explicitly."""

from __future__ import annotations

import json

import pytest

from service.settings import Settings


def _policy(tmp_path, **gen):
    (tmp_path / "generation_config.json").write_text(json.dumps(gen))
    return str(tmp_path)


def test_sampling_follows_the_model_generation_config(tmp_path, monkeypatch):
    for var in ("EVOHARNESS_TEMPERATURE", "EVOHARNESS_TOP_P"):
        monkeypatch.delenv(var, raising=False)
    model = _policy(tmp_path, do_sample=True, temperature=0.7, top_p=0.9)
    s = Settings(model=model)
    assert (s.temperature, s.top_p) == (0.7, 0.9)
    monkeypatch.setenv("EVOHARNESS_TEMPERATURE", "0")      # an explicit setting wins
    assert Settings(model=model).temperature == 0.0


def test_greedy_when_the_model_does_not_sample(tmp_path, monkeypatch):
    for var in ("EVOHARNESS_TEMPERATURE", "EVOHARNESS_TOP_P"):
        monkeypatch.delenv(var, raising=False)
    s = Settings(model=_policy(tmp_path, temperature=0.7))   # no do_sample: HF generate would be greedy too
    assert (s.temperature, s.top_p) == (0.0, 1.0)
    assert Settings(model=str(tmp_path / "missing")).temperature == 0.0


def test_sampling_values_are_still_validated(tmp_path):
    with pytest.raises(ValueError):
        Settings(model=str(tmp_path), temperature=3.0)


def test_the_lease_is_short_and_its_heartbeat_beats_within_it(tmp_path, monkeypatch):
    for var in ("EVOHARNESS_STEP_LEASE_MS", "EVOHARNESS_LEASE_HEARTBEAT_MS", "EVOHARNESS_STEP_TIMEOUT_S"):
        monkeypatch.delenv(var, raising=False)
    s = Settings(model=str(tmp_path))
    assert (s.step_lease_ms, s.lease_heartbeat_ms, s.step_timeout_s) == (3000, 1000, 100.0)  # a step outlives a lease
    assert Settings(model=str(tmp_path), step_lease_ms=900).lease_heartbeat_ms == 300
    assert Settings(model=str(tmp_path), step_lease_ms=900, lease_heartbeat_ms=800).lease_heartbeat_ms == 800
    for bad in ({"lease_heartbeat_ms": 3000}, {"lease_heartbeat_ms": 5000}, {"lease_heartbeat_ms": 0},
                {"step_lease_ms": 0}):
        with pytest.raises(ValueError):
            Settings(model=str(tmp_path), **bad)
