"""Generator: rooms, tasks, PDDL problems and game folders on the real planner and engine."""

from __future__ import annotations

import json

import pytest

from training.envs.alfworld import generate
from training.envs.alfworld.gamefiles import read_game, read_traj
from training.envs.alfworld.paths import GAME_FILE, TRAJ_FILE, list_games
from training.envs.alfworld.rooms import all_room_numbers, load_room
from training.envs.alfworld.splits import plan_split
from training.envs.alfworld.tasks import TASK_TYPES, candidate_tasks


def test_all_120_floor_plans_load_with_receptacles():
    numbers = all_room_numbers()
    assert len(numbers) == 120
    for n in numbers:
        room = load_room(n)
        assert room.receptacles and room.object_types, room.name
        assert all("basinbasin" not in rid.lower() for _, rid in room.receptacles)


def test_every_task_type_is_supported_by_some_room():
    rooms = [load_room(n) for n in all_room_numbers()]
    for task_type in TASK_TYPES:
        assert any(candidate_tasks(r, task_type) for r in rooms), task_type


def test_fixture_games_are_complete_alfworld_game_folders(alf_games):
    types = {}
    for game in alf_games:
        assert (game / TRAJ_FILE).exists() and (game / GAME_FILE).exists()
        traj, data = read_traj(game), read_game(game)
        assert set(data) >= {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
        assert data["solvable"] is True and data["walkthrough"]
        assert "UNKNOWN GOAL" not in data["grammar"]
        assert traj["turk_annotations"]["anns"][0]["task_desc"] in data["grammar"]
        assert set(traj["pddl_params"]) == {"object_target", "parent_target", "toggle_target", "mrecep_target",
                                           "object_sliced"}
        types[traj["task_type"]] = types.get(traj["task_type"], 0) + 1
    assert types == {t: 2 for t in TASK_TYPES}


def test_generation_is_deterministic_and_reproduces_the_committed_fixtures(tmp_path, alf_games):
    """Regenerate two fixture games from their seed: byte-identical to the committed ones (planner included)."""
    specs = [s for s in plan_split("fixtures") if s.index in (3, 10)]
    for spec in specs:
        record = generate.generate_game(spec, tmp_path)
        fresh = tmp_path / record["game"]
        committed = next(g for g in alf_games if g.name == record["game"])
        for name in (TRAJ_FILE, GAME_FILE):
            assert (fresh / name).read_bytes() == (committed / name).read_bytes(), name


def test_generate_split_cli_with_workers_and_cache(tmp_path, capsys):
    assert generate.main(["--split", "fixtures", "--count", "3", "--out", str(tmp_path), "--workers", "2"]) == 0
    games = list_games(tmp_path / "fixtures")
    assert len(games) == 3
    manifest = json.loads((tmp_path / "fixtures" / "manifest.json").read_text())
    assert manifest["count"] == 3 and len(manifest["games"]) == 3
    assert all(read_game(g)["solvable"] for g in games)
    again = generate.generate_split("fixtures", out=tmp_path, count=3, progress=False)
    assert again.get("cached") is True
    assert "3 solvable games" in capsys.readouterr().out


def test_planner_check_runs_in_a_killable_child(alf_games):
    """The solvability check answers like the in-process planner, and gives up when out of time."""
    game = alf_games[0] / GAME_FILE
    walkthrough = read_game(alf_games[0])["walkthrough"]
    assert generate.plan_and_verify(game, timeout_s=None) == walkthrough
    assert generate.plan_and_verify(game, timeout_s=60) == walkthrough
    with pytest.raises(generate.PlanTimeout):
        generate.plan_and_verify(game, timeout_s=0.001)


def test_first_games_of_a_plan_then_the_rest_resume_game_by_game(tmp_path):
    """--first makes the first N games of the --count plan; a later run of the whole plan reuses them from disk."""
    part = generate.generate_split("fixtures", out=tmp_path, count=4, first=2, progress=False)
    assert (part["count"], part["plan_count"], len(part["games"])) == (2, 4, 2)
    plan = plan_split("fixtures", count=4)
    assert [g["game"][:4] for g in part["games"]] == [f"{s.index:04d}" for s in plan[:2]]
    whole = generate.generate_split("fixtures", out=tmp_path, count=4, progress=False)
    assert not whole.get("cached") and len(whole["games"]) == 4
    reused = {g["game"] for g in whole["games"] if g.get("cached")}
    assert reused == {g["game"] for g in part["games"]}        # the first two were not planned again
    assert generate.generate_split("fixtures", out=tmp_path, count=4, first=2, progress=False).get("cached") is not True


def test_unverified_games_skip_the_planner_and_still_play(tmp_path, alf_games):
    """--no-verify writes each spec's first sample without a walkthrough; the real engine loads and plays it, its
    manifest says it is unverified, and a verified request does not take it from the cache (nor the reverse)."""
    from training.envs.alfworld.env import AlfWorldEnv

    assert generate.main(["--split", "fixtures", "--count", "4", "--out", str(tmp_path), "--no-verify"]) == 0
    manifest = json.loads((tmp_path / "fixtures" / "manifest.json").read_text())
    assert manifest["verified"] is False and len(manifest["games"]) == 4
    games = list_games(tmp_path / "fixtures")
    assert all(not read_game(g)["solvable"] and "walkthrough" not in read_game(g) for g in games)
    assert all(read_traj(g)["generator"]["attempt"] == 0 for g in games)
    # the same text as the verified first attempt: only the planner's fields differ
    name, traj, game = generate.build_game(plan_split("fixtures", count=4)[0], 0)
    assert read_traj(tmp_path / "fixtures" / name) == traj
    assert read_game(tmp_path / "fixtures" / name)["pddl_problem"] == game["pddl_problem"]
    env = AlfWorldEnv(max_steps=5)
    try:
        obs = env.reset(games[0])
        assert obs["observation"] and obs["task"] and obs["admissible_actions"]
        assert env.step(obs["admissible_actions"][0])["observation"]
    finally:
        env.close()
    assert generate.generate_split("fixtures", out=tmp_path, count=4, progress=False, verify=False)["cached"]
    verified = generate.generate_split("fixtures", out=tmp_path, count=4, progress=False)
    assert not verified.get("cached") and verified["verified"] is True
    assert all(read_game(tmp_path / "fixtures" / g["game"])["solvable"] for g in verified["games"])


def test_a_spec_skipped_for_planner_timeouts_is_tried_again_by_the_next_run(tmp_path, monkeypatch):
    """A timeout says how loaded the box was, not what the split holds: the manifest that records the skip is not
    taken as cached, and a run with time to plan fills the split."""
    monkeypatch.setattr(generate.plan_and_verify, "__defaults__", (0.001,))
    starved = generate.generate_split("fixtures", out=tmp_path, count=2, progress=False, workers=1)
    assert len(starved["skipped"]) == 2 and starved["games"] == []
    monkeypatch.setattr(generate.plan_and_verify, "__defaults__", (60.0,))
    again = generate.generate_split("fixtures", out=tmp_path, count=2, progress=False, workers=1)
    assert not again.get("cached") and again["skipped"] == [] and len(again["games"]) == 2
