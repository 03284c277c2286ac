"""training.dagger's bookkeeping: the rollout report, and a round that resumes from its own file."""

from __future__ import annotations

import json

from training import dagger


def _traj(game: str, won: bool, actions: list[str], labels: list[str]) -> dict:
    return {"game": game, "task_text": "t", "task_type": "pick_and_place_simple", "won": won, "steps": [],
            "actions": actions, "labels": labels, "expert": "dagger", "round": 1}


def test_report_counts_wins_and_agreement():
    rep = dagger.report([_traj("a", True, ["x", "y"], ["x", "y"]), _traj("b", False, ["x", "z"], ["x", "y"])], 3.0)
    assert rep == {"games": 2, "policy_won": 1, "steps": 4, "agreement": 0.75, "seconds": 3.0}


def test_a_round_whose_games_are_all_in_its_file_plays_nothing_and_reports_them(tmp_path, monkeypatch):
    games = tmp_path / "games"
    for name in ("g0", "g1", "g2"):
        (games / name).mkdir(parents=True)
        (games / name / "game.tw-pddl").write_text("{}")
    out = tmp_path / "teacher"
    out.mkdir()
    rows = [_traj("g0", True, ["a"], ["a"]), _traj("g1", False, ["a", "b"], ["a", "c"]),
            _traj("g2", True, ["a"], ["a"])]
    (out / "dagger-train.r1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(dagger, "play", lambda args, todo: (_ for _ in ()).throw(AssertionError(f"played {todo}")))
    assert dagger.main(["--model", "unused", "--games", str(games), "--n", "2", "--out", str(out)]) == 0
    rep = json.loads((out / "dagger-train.r1.json").read_text())
    assert (rep["games"], rep["policy_won"], rep["steps"], rep["agreement"]) == (2, 1, 3, 0.667)


def test_an_interrupted_round_plays_only_the_games_missing_from_its_file(tmp_path, monkeypatch):
    games = tmp_path / "games"
    for name in ("g0", "g1"):
        (games / name).mkdir(parents=True)
        (games / name / "game.tw-pddl").write_text("{}")
    out = tmp_path / "teacher"
    out.mkdir()
    (out / "dagger-train.r1.jsonl").write_text(json.dumps(_traj("g0", True, ["a"], ["a"])) + "\n")
    played = []

    def fake_play(args, todo):
        played.extend(g.name for g in todo)
        yield _traj("g1", False, ["b"], ["c"])

    monkeypatch.setattr(dagger, "play", fake_play)
    dagger.main(["--model", "unused", "--games", str(games), "--out", str(out)])
    assert played == ["g1"]
    lines = (out / "dagger-train.r1.jsonl").read_text().splitlines()
    assert [json.loads(line)["game"] for line in lines] == ["g0", "g1"]
    assert json.loads((out / "dagger-train.r1.json").read_text())["games"] == 2
