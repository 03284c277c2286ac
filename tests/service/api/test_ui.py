"""The audit timeline page (/ui/sessions/{id}) loaded in headless Chromium (Debian `chromium`) from a real
`evoharness serve`: a real session (steps on the vLLM engine, a control, the end) and what the page shows."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import httpx
import pytest

from service.client import EvoHarnessClient
from tests.deploy.live_server import live_server

ROOT = Path(__file__).resolve().parents[3]
SHOT = ROOT / "docs" / "img" / "audit-timeline.png"
ROOM = ["go to countertop 1", "go to fridge 1", "go to sinkbasin 1", "look", "inventory"]
OBS = ["You are in the middle of a room. Looking quickly around you, you see a countertop 1, a fridge 1, "
       "and a sinkbasin 1.",
       "You arrive at fridge 1. The fridge 1 is closed.",
       "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a knife 2."]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")



def chromium(tmp_path: Path, *args: str) -> str:
    assert CHROMIUM, "headless Chromium is required: apt-get install chromium (.ci/run installs it)"
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          "--no-first-run", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'chrome'}", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def rows(dom: str) -> list[str]:
    body = re.search(r'<tbody>(.*)</tbody>', dom, re.S).group(1)
    return re.findall(r'<tr id="v\d+".*?</tr>', body, re.S)


@pytest.fixture(scope="module")
def session(tiny_model, tmp_path_factory):
    with live_server(tiny_model, tmp_path_factory.mktemp("ui") / "serve.log") as url, EvoHarnessClient(url) as evo:
        sid = evo.create_session("Your task is to: put a clean apple in fridge.", domain="alfworld",
                                 harness_cap=2).session_id
        for obs in OBS:
            evo.step(sid, obs, ROOM)
        evo.set_controls(sid, pin_beliefs={"apple 1": {"type": "object", "at": "countertop 1"}})
        evo.end(sid, won=False)
        yield url, sid, evo.audit_all(sid)


def test_timeline_shows_every_event(session, tmp_path):
    url, sid, events = session
    dom = chromium(tmp_path, "--virtual-time-budget=3000", "--dump-dom", f"{url}/ui/sessions/{sid}")
    assert 'data-ready="1"' in dom                                 # the inline script ran
    trs = rows(dom)
    assert len(trs) == len(events) == events[-1]["version"]
    for tr, ev in zip(trs, events):
        text = unescape(re.sub(r"<[^>]+>", " ", tr))
        assert f'href="?version={ev["version"]}"' in tr and ev["kind"] in text
        if ev["kind"] == "env":
            assert "action" in text and ev["arg"] in text
            assert f'{ev["usage"]["prompt_tokens"]} + {ev["usage"]["completion_tokens"]}' in text
        if ev["kind"] == "harness":
            assert ev["verb"] in text
        if ev.get("reason"):
            assert ev["reason"][:40] in text
        ops = {op["op"] for op in ev["patch"]}
        for op in ops:
            assert f'class="op op-{op}"' in tr
    assert f"{len(events)} of {len(events)} events shown" in dom
    kinds = [e["kind"] for e in events]
    assert kinds.count("observe") == 3 and kinds[-2:] == ["control", "end"]
    assert "op-add" in dom and "op-replace" in dom                 # observations add, the end replaces status


def test_time_travel_link(session, tmp_path):
    url, sid, events = session
    k = 2
    dom = chromium(tmp_path, "--dump-dom", f"{url}/ui/sessions/{sid}?version={k}")
    assert f"State at version {k}" in dom
    served = httpx.get(f"{url}/v1/sessions/{sid}/state", params={"version": k}).json()["state"]
    shown = unescape(re.search(r'<pre class="state" id="state">(.*?)</pre>', dom, re.S).group(1))
    assert json.loads(shown) == served          # the page shows exactly the state at version k
    trs = rows(dom)
    assert 'class="at"' in trs[k - 1] and all('class="later"' in tr for tr in trs[k:])
    assert httpx.get(f"{url}/ui/sessions/{sid}", params={"version": 999}).status_code == 404
    assert httpx.get(f"{url}/ui/sessions/{'0' * 32}").status_code == 404


def test_screenshot_for_the_docs(session, tmp_path):
    url, sid, _ = session
    shot = tmp_path / "shot.png"
    chromium(tmp_path, "--window-size=1280,800", f"--screenshot={shot}", f"{url}/ui/sessions/{sid}")
    assert shot.stat().st_size > 10_000
    if os.environ.get("EVOHARNESS_UPDATE_SCREENSHOT"):      # refresh docs/img on purpose, not on every run
        shutil.copyfile(shot, SHOT)
    assert SHOT.exists()
