"""A new bank starts from the served policy's Experience (its bank.json), as the policy was evaluated; real Redis."""

import json
from pathlib import Path

import pytest

from service.banks import BankSeedError, load_bank_seed, seed_path

ROOT = Path(__file__).resolve().parents[3]


def _seed(tmp_path: Path) -> Path:
    state = {"entries": {
        "e1": {"id": "e1", "category": "search_priority", "key": "where:pen", "text": "pen is usually at desk",
               "evidence": 3, "uses": 1, "failures": 0, "pinned": False, "data": {}, "created_in": 1,
               "updated_in": 1},
        "e2": {"id": "e2", "category": "task_type", "key": "plan:pick", "text": "pick: take x -> put x in y",
               "evidence": 5, "uses": 2, "failures": 0, "pinned": True, "data": {}, "created_in": 1, "updated_in": 2}},
        "caps": {"general": 5}, "controls": {"disabled_verbs": [], "harness_cap": None}, "next_id": 3,
        "episodes": 7, "wins": 6}
    path = tmp_path / "bank.json"
    path.write_text(json.dumps(state))
    return path


async def test_new_banks_start_from_the_seed_each_its_own_copy(app_factory, tmp_path):
    seed = _seed(tmp_path)
    async with app_factory(bank_seed=str(seed), bank_cap=40) as c:
        await c.post("/v1/sessions", json={"task": "put a pen in the drawer", "bank": "default"})
        await c.post("/v1/sessions", json={"task": "put a pen in the drawer", "bank": "other"})
        default = (await c.get("/v1/banks/default")).json()
        other = (await c.get("/v1/banks/other")).json()
    want = json.loads(seed.read_text())
    for bank in (default, other):
        assert bank["entries"] == want["entries"] and bank["version"] == 0
        assert (bank["next_id"], bank["episodes"], bank["wins"]) == (3, 7, 6)
        assert set(bank["caps"].values()) == {40} and len(bank["caps"]) == 5   # this service's cap, every category


async def test_none_starts_empty_and_a_model_folder_without_bank_json_too(app_factory, tmp_path):
    async with app_factory(bank_seed="none") as c:
        await c.post("/v1/sessions", json={"task": "put a pen in the drawer"})
        bank = (await c.get("/v1/banks/default")).json()
    assert bank["entries"] == {} and bank["next_id"] == 1
    assert seed_path(None, str(tmp_path)) is None
    assert seed_path(None, str(ROOT / "models" / "default-policy")) == ROOT / "models" / "default-policy" / "bank.json"
    assert seed_path("none", str(ROOT / "models" / "default-policy")) is None


def test_the_shipped_bank_is_a_valid_seed_and_a_bad_file_stops_the_start(tmp_path, redis_url):
    from service.api.app import create_app
    from tests.support import make_settings

    shipped = load_bank_seed(ROOT / "models" / "default-policy" / "bank.json")
    assert len(shipped["entries"]) > 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"entries": {"e1": {"category": "nonsense", "text": "x"}}}))
    with pytest.raises(BankSeedError, match="not an Experience bank"):
        create_app(make_settings(redis_url, bank_seed=str(bad)))
    with pytest.raises(BankSeedError, match="missing.json"):
        create_app(make_settings(redis_url, bank_seed=str(tmp_path / "missing.json")))
