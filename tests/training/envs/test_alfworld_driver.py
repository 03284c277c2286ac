"""Episode driver: policies (callable, expert, HTTP service contract), report, and the process pool."""

from __future__ import annotations

import json

import httpx

from training.envs.alfworld.driver import (
    CallablePolicy,
    ExpertPolicy,
    HTTPPolicy,
    Policy,
    format_table,
    main,
    play_games,
    summarize,
)


def first_admissible(task, observation, admissible):
    return admissible[0], {"harness_calls": 1, "prompt_tokens": 10, "completion_tokens": 2}


def test_callable_policy_is_played_and_usage_is_summed(alf_games):
    policy = CallablePolicy(first_admissible)
    assert isinstance(policy, Policy)
    results = play_games(alf_games[:2], policy, max_steps=4)
    assert [r["steps"] for r in results] == [4, 4]
    assert all(not r["won"] for r in results)
    summary = summarize(results)
    assert summary["overall"]["total_harness_calls"] == 8
    assert summary["overall"]["mean_prompt_tokens"] == 40
    assert summary["overall"]["success_pct"] == 0.0


def test_expert_policies_reach_full_success_in_the_report(expert_results):
    for expert, results in expert_results.items():
        summary = summarize(results)
        assert summary["overall"]["success_pct"] == 100.0, expert
        assert all(b["success_pct"] == 100.0 for b in summary["per_task_type"].values())
        table = format_table(summary)
        assert "pick_two" in table and "100.0" in table


class FakeService:
    """The EvoHarness step API contract, answering with the game's walkthrough (records what it was sent)."""

    def __init__(self, walkthrough):
        self.walkthrough = list(walkthrough)
        self.calls = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        self.calls.append((request.url.path, body))
        if request.url.path == "/v1/sessions":
            return httpx.Response(200, json={"session_id": "s1", "version": 3})
        if request.url.path == "/v1/sessions/s1/step":
            action = self.walkthrough.pop(0)
            return httpx.Response(200, json={
                "action": action, "turns": [{"verb": "recall"}, {"action": action}], "version": 3,
                "usage": {"prompt_tokens": 100, "completion_tokens": 7, "harness_calls": 1,
                          "model_seconds": 0.01, "total_seconds": 0.02}})
        if request.url.path == "/v1/sessions/s1/end":
            return httpx.Response(200, json={"ok": True})
        return httpx.Response(404)


def test_http_policy_speaks_the_service_api(alf_games):
    from training.envs.alfworld.gamefiles import read_game

    game = alf_games[3]
    walkthrough = read_game(game)["walkthrough"]
    service = FakeService(walkthrough)
    policy = HTTPPolicy("http://service", mode="inline", bank="b1", transport=httpx.MockTransport(service))
    [record] = play_games([game], policy, max_steps=20)
    assert record["won"] and record["steps"] == len(walkthrough)
    assert record["harness_calls"] == len(walkthrough) and record["prompt_tokens"] == 100 * len(walkthrough)
    paths = [p for p, _ in service.calls]
    assert paths[0] == "/v1/sessions" and paths[-1] == "/v1/sessions/s1/end"
    assert paths.count("/v1/sessions/s1/step") == len(walkthrough)
    opened = service.calls[0][1]
    assert opened["domain"] == "alfworld" and opened["mode"] == "inline" and opened["bank"] == "b1" and opened["task"]
    step = service.calls[1][1]
    assert set(step) == {"observation", "admissible_actions", "won", "done"}
    assert step["observation"].startswith("You are in the middle of a room.")
    assert service.calls[-1][1] == {"won": True}


def test_pool_plays_in_parallel_like_serial(alf_games):
    games = [alf_games[i] for i in (3, 5, 10, 11)]
    serial = play_games(games, ExpertPolicy("handcoded"), max_steps=40)
    pooled = play_games(games, ExpertPolicy("handcoded"), max_steps=40, workers=2)
    strip = [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in serial]
    assert strip == [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in pooled]
    assert all(r["won"] for r in pooled)


def test_driver_cli_writes_json_and_prints_a_table(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(["--split", "fixtures", "--n", "2", "--policy", "planner", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["summary"]["overall"]["games"] == 2 and len(report["episodes"]) == 2
    assert "success %" in capsys.readouterr().out



def test_driver_http_policy_sends_the_api_key(monkeypatch):
    """`--policy http --api-key K` (default $EVOHARNESS_API_KEY) authenticates every request as `Bearer K`."""
    from training.envs.alfworld.driver import build_parser, make_policy

    args = build_parser().parse_args(["--policy", "http", "--url", "http://service", "--api-key", "k1"])
    assert make_policy(args).headers == {"Authorization": "Bearer k1"}
    monkeypatch.setenv("EVOHARNESS_API_KEY", "k2")
    assert make_policy(build_parser().parse_args(["--policy", "http"])).headers == {"Authorization": "Bearer k2"}
    monkeypatch.delenv("EVOHARNESS_API_KEY")
    assert make_policy(build_parser().parse_args(["--policy", "http"])).headers == {}
