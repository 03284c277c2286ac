"""Key configuration (file JSON/YAML, env), hashing, refusal to start without keys, the loud dev-mode warning,
and the `evoharness keys` commands. No engine, no Redis."""

from __future__ import annotations

import io
import json
import logging

import pytest

from service.auth import AuthConfigError, KeyRing, hash_key, load_keyring, parse_records
from service.settings import Settings

REC = {"id": "k1", "role": "agent", "tenant": "acme", "sha256": hash_key("s1")}


def test_hash_is_sha256_hex():
    assert hash_key("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_lookup_matches_only_the_right_secret():
    ring = KeyRing(parse_records(json.dumps([REC, {**REC, "id": "k2", "role": "ops", "sha256": hash_key("s2")}]), "t"))
    assert ring.lookup("s1").id == "k1" and ring.lookup("s2").role == "ops"
    assert ring.lookup("s3") is None and ring.lookup("") is None


def test_file_json_and_yaml_and_env(tmp_path):
    j = tmp_path / "keys.json"
    j.write_text(json.dumps({"keys": [REC]}))
    y = tmp_path / "keys.yaml"
    y.write_text(f"- id: k2\n  role: auditor\n  tenant: acme\n  sha256: 'sha256:{hash_key('s2')}'\n")
    for path in (j, y):
        ring = load_keyring(Settings(auth="on", api_keys_file=str(path)))
        assert len(ring) == 1
    env = json.dumps([{**REC, "id": "k3", "sha256": hash_key("s3")}])
    ring = load_keyring(Settings(auth="on", api_keys_file=str(j), api_keys=env))
    assert {k.id for k in ring.keys} == {"k1", "k3"}


def test_environment_variables_are_read(monkeypatch, tmp_path):
    monkeypatch.setenv("EVOHARNESS_AUTH", "on")
    monkeypatch.setenv("EVOHARNESS_API_KEYS", json.dumps([REC]))
    assert load_keyring(Settings()).lookup("s1").tenant == "acme"


@pytest.mark.parametrize("bad,what", [
    ({**REC, "role": "root"}, "unknown role"),
    ({**REC, "tenant": "a/b"}, "tenant"),
    ({**REC, "sha256": "xyz"}, "64 hex"),
    ({"id": "k1", "role": "agent", "tenant": "acme", "key": "plaintext"}, "not the key"),
    ({"id": "k1", "role": "agent"}, "lacks"),
])
def test_bad_records_are_refused(bad, what):
    with pytest.raises(AuthConfigError, match=what):
        parse_records(json.dumps([bad]), "t")


def test_duplicates_are_refused():
    with pytest.raises(AuthConfigError, match="duplicate"):
        KeyRing(parse_records(json.dumps([REC, {**REC, "sha256": hash_key("x")}]), "t"))
    with pytest.raises(AuthConfigError, match="twice"):
        KeyRing(parse_records(json.dumps([REC, {**REC, "id": "k2"}]), "t"))


def test_auth_on_without_keys_refuses_to_start(monkeypatch):
    from service.api.app import create_app

    monkeypatch.delenv("EVOHARNESS_API_KEYS", raising=False)
    monkeypatch.delenv("EVOHARNESS_API_KEYS_FILE", raising=False)
    with pytest.raises(AuthConfigError, match="no API keys"):
        create_app(Settings(auth="on", redis_url="redis://127.0.0.1:1/0"))
    assert Settings.model_fields["auth"].default == "on"      # on unless switched off explicitly


def test_dev_mode_warns_loudly(capsys, caplog):
    from service.api.app import create_app

    with caplog.at_level(logging.WARNING, logger="evoharness"):
        app = create_app(Settings(auth="off", redis_url="redis://127.0.0.1:1/0"))
    assert app.state.keyring is None
    assert "AUTH IS OFF" in capsys.readouterr().err
    assert any("AUTH IS OFF" in r.message for r in caplog.records)


def test_keys_cli_new_and_hash(capsys, monkeypatch):
    from service.cli import main

    assert main(["keys", "new", "--id", "a1", "--role", "auditor", "--tenant", "acme"]) == 0
    out = capsys.readouterr()
    record = json.loads(out.out)
    key = out.err.strip().split()[-1]
    assert record == {"id": "a1", "role": "auditor", "tenant": "acme", "sha256": hash_key(key)}
    assert KeyRing(parse_records(json.dumps([record]), "t")).lookup(key).id == "a1"
    monkeypatch.setattr("sys.stdin", io.StringIO(key + "\n"))
    assert main(["keys", "hash"]) == 0
    assert capsys.readouterr().out.strip() == hash_key(key)
