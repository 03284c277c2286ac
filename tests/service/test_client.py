"""service.client (sync + async), the `evoharness session|bank` CLI and the ALFWorld driver's HTTP policy against a
real `evoharness serve` (tiny random-weight model on the in-process vLLM engine, private redis-server)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from service.cli import main as cli
from service.client import (
    AsyncEvoHarnessClient,
    Conflict,
    EvoHarnessClient,
    NotFound,
    PayloadTooLarge,
    RetryPolicy,
    Step,
    Unavailable,
    Unprocessable,
)
from tests.deploy.live_server import live_server

ROOM = ["go to countertop 1", "go to fridge 1", "go to sinkbasin 1", "look", "inventory"]
OBS = ("You are in the middle of a room. Looking quickly around you, you see a countertop 1, a fridge 1, "
       "and a sinkbasin 1.")
TASK = "Your task is to: put a clean apple in fridge."
FAST = RetryPolicy(attempts=3, backoff_s=0.01)


@pytest.fixture(scope="module")
def url(tiny_model, tmp_path_factory):
    with live_server(tiny_model, tmp_path_factory.mktemp("client") / "serve.log") as u:
        yield u


class Flaky(httpx.HTTPTransport):
    """Real HTTP, with scripted faults on /step: 'lost' forwards the request and then drops the response
    (the step ran), 'down' answers 503 without forwarding. Records the Idempotency-Key of every step try."""

    def __init__(self, faults: list[str]):
        super().__init__()
        self.faults, self.keys = list(faults), []

    def handle_request(self, request):
        if not request.url.path.endswith("/step"):
            return super().handle_request(request)
        self.keys.append(request.headers.get("Idempotency-Key"))
        fault = self.faults.pop(0) if self.faults else None
        if fault == "down":
            return httpx.Response(503, json={"title": "Engine unavailable", "status": 503, "detail": "scripted"})
        resp = super().handle_request(request)
        if fault == "lost":
            resp.read()
            raise httpx.ReadError("connection dropped after the request was sent")
        return resp


def test_session_round_trip(url):
    with EvoHarnessClient(url) as evo:
        assert evo.ready()["status"] == "ready"
        created = evo.create_session(TASK, domain="alfworld", harness_cap=1)
        assert created.version == 0 and len(created.session_id) == 32
        v = 0
        for _ in range(3):
            step = evo.step(created.session_id, OBS, ROOM)
            assert isinstance(step, Step) and step.action in ROOM
            assert step.turns[-1].kind == "env" and step.turns[-1].arg == step.action
            assert step.usage.prompt_tokens > 0 and step.usage.harness_calls == len(step.turns) - 1
            assert step.version > v
            v = step.version
        assert evo.state(created.session_id)["version"] == v
        assert evo.state(created.session_id, 1)["state"]["belief"]["entities"]["fridge 1"]
        events = evo.audit_all(created.session_id, page=2)
        assert [e["version"] for e in events] == list(range(1, v + 1))
        assert evo.diff(created.session_id, 0, 1)["patch"]
        assert evo.end(created.session_id, won=True)["status"] == "ended"
        assert "entries" in json.dumps(evo.bank("default")) or evo.bank("default")
        assert "evidence" in evo.consolidate("default")


def test_errors_are_typed(url):
    with EvoHarnessClient(url, retry=FAST) as evo:
        with pytest.raises(NotFound) as e:
            evo.state("0" * 32)
        assert e.value.status == 404 and e.value.problem["title"]
        sid = evo.create_session(TASK, domain="alfworld", harness_cap=0).session_id
        with pytest.raises(Conflict) as e:
            evo.step(sid, OBS, ROOM, if_match=7)
        assert e.value.version == 0
        with pytest.raises(PayloadTooLarge):
            evo.step(sid, "x" * 16_001, ROOM)
        with pytest.raises(Unprocessable) as e:
            evo.step(sid, OBS, [])
        assert e.value.errors and e.value.errors[0]["field"] == "admissible_actions"
        with pytest.raises(NotFound):
            evo.state(sid, version=99)


def test_lost_response_is_retried_with_the_same_key(url):
    flaky = Flaky(["lost"])
    with EvoHarnessClient(url, retry=FAST, transport=flaky) as evo:
        sid = evo.create_session(TASK, domain="alfworld", harness_cap=0).session_id
        step = evo.step(sid, OBS, ROOM)
        assert len(flaky.keys) == 2 and flaky.keys[0] == flaky.keys[1]
        events = evo.audit_all(sid)
        assert sum(e["kind"] == "observe" for e in events) == 1       # the step ran once
        assert step.version == events[-1]["version"] == evo.state(sid)["version"]
        evo.step(sid, OBS, ROOM)                                        # the next step gets a new key
        assert len(set(flaky.keys)) == 2


def test_503_is_retried_then_raised(url):
    flaky = Flaky(["down", "down"])
    with EvoHarnessClient(url, retry=FAST, transport=flaky) as evo:
        sid = evo.create_session(TASK, domain="alfworld", harness_cap=0).session_id
        assert evo.step(sid, OBS, ROOM, idempotency_key="k-1").action in ROOM
        assert flaky.keys == ["k-1"] * 3
    flaky = Flaky(["down"] * 5)
    with EvoHarnessClient(url, retry=RetryPolicy(attempts=2, backoff_s=0.01), transport=flaky) as evo:
        with pytest.raises(Unavailable) as e:
            evo.step(sid, OBS, ROOM)
        assert e.value.status == 503 and len(flaky.keys) == 2


async def test_async_client_concurrent_sessions(url):
    async with AsyncEvoHarnessClient(url) as evo:
        sids = [(await evo.create_session(TASK, domain="alfworld", harness_cap=1)).session_id for _ in range(3)]
        steps = await asyncio.gather(*(evo.step(s, OBS, ROOM) for s in sids))
        assert all(s.action in ROOM for s in steps)
        again = await evo.step(sids[0], OBS, ROOM, idempotency_key="same")
        replay = await evo.step(sids[0], OBS, ROOM, idempotency_key="same")
        assert replay.raw == again.raw
        with pytest.raises(NotFound):
            await evo.audit("f" * 32)
        with pytest.raises(Conflict):
            await evo.step(sids[1], OBS, ROOM, if_match=0)


def test_cli_session_and_bank(url, capsys):
    def run(*args) -> dict:
        assert cli([*args, "--url", url]) == 0
        return json.loads(capsys.readouterr().out)

    sid = run("session", "new", TASK, "--domain", "alfworld", "--harness-cap", "1")["session_id"]
    step = run("session", "step", sid, OBS, *[x for a in ROOM for x in ("-a", a)], "--idempotency-key", "c1")
    assert step["action"] in ROOM
    assert run("session", "state", sid, "--version", "1")["version"] == 1
    assert len(run("session", "audit", sid, "--all")["events"]) == step["version"]
    assert run("session", "diff", sid, "0", "1")["patch"]
    assert "evidence" in run("bank", "consolidate")
    assert run("bank", "show", "default")
    assert cli(["session", "state", "0" * 32, "--url", url]) == 1
    assert "404" in capsys.readouterr().err


def test_the_driver_plays_an_alfworld_game_against_the_service(url, tmp_path, capsys):
    """ALFWorld games against a running service: the episode driver's HTTP policy (not part of the service CLI)."""
    from training.envs.alfworld.driver import main as driver

    out = tmp_path / "play.json"
    assert driver(["--policy", "http", "--url", url, "--api-key", "unused-in-dev-mode", "--n", "1",
                   "--max-steps", "3", "--json", str(out)]) == 0
    assert "games" in capsys.readouterr().out
    report = json.loads(out.read_text())
    (episode,) = report["episodes"]
    assert episode["steps"] == 3 and episode["prompt_tokens"] > 0 and report["summary"]["overall"]["games"] == 1
