"""The Grafana board and the Prometheus rules against a real Prometheus scraping a real `evoharness serve`.

Real components: `prometheus` (Debian package) on a loopback port, scraping every 1 s and evaluating
deploy/prometheus/evoharness.rules.yml every 1 s, with the compose config's `evoharness` job; `evoharness serve`
with the tiny untrained model in its in-process vLLM engine (temperature 2, so the random policy does call harness
verbs; the engine's default seed 0 makes a run repeatable) and a redis-server this test owns. The test drives
ALFWorld-style sessions through the HTTP API and tallies, from the API's answers (steps, audit events with per-turn
usage, states, consolidation ops), what every `evoharness_*` family must have counted:

* harness verbs: for each verb, sessions whose operator controls (session PATCH) allow only that verb, with a
  per-step cap of 1, until the policy called it; a session whose controls allow `commit` only from step 5 on
  (harness calls at a second step-position bucket);
* errors: 404 (unknown session), 422 (bad body), 413 (observation too large), 409 (stale If-Match; a step
  `conflict`), an idempotent replay (step `replay`); 504: the vLLM engine-core process is SIGSTOPped while steps
  wait on it (engine timeout 5 s), then SIGCONTinued; 503: the redis-server is stopped while /readyz is asked,
  then started again (append-only file: nothing lost). /metrics is not rate-limited, so Prometheus keeps scraping
  through such an outage: the test checks that no scrape failed (`up` stayed 1) and sees the 503s as they happen;
* consolidation: won sessions of bank `evolve`, whose bank controls disable every verb, then the rules evolver;
  every bank has a category cap of 1 (EVOHARNESS_BANK_CAP), so the evolved bank reaches its cap;
* active sessions: sessions left open, ended, deleted.

Why two phases. Prometheus's rate()/increase() see a counter's growth only between samples, and a labelled
series appears at its first increment, so whatever it counted before its first scrape is invisible to a window.
Phase 1 makes every series the test will touch exist; after a scrape at t_s, phase 2 repeats the traffic; after a
scrape at T, every expression is evaluated at T over the window [t_s, T] (ranges replaced by that window, +1 ms)
and compared with the test's phase-2 tallies: then rate = delta / (T - t_s) with no extrapolation beyond 1 ms, so
ratios are exact and rates are exact up to 1e-4. (If the random policy made a label set in phase 2 that phase 1
did not, that window is not used: phase 2 runs again after another scrape.)

What is evaluated through /api/v1/query:
* every board expression, with $__rate_interval = 5m, and every rule expression as written, at T (alerts: at the
  first rule evaluation after T): each must return data with finite values and the label sets of the traffic
  (exceptions below);
* the same expressions over the phase-2 window (recorded series used by an alert replaced by their expressions):
  values equal to the tallies (expected() below: one entry per expression, so a new board panel or rule needs
  one); step-latency quantiles between the quantiles of per-step bounds (the answer's usage.total_seconds, the
  request's round trip), KV-cache usage in [0, 1];
* the raw counters and gauges at T minus their values before any traffic: equal to the whole run's tallies;
* each alert as written: it returns data exactly for the alerts this traffic makes hold (5xx ratio, engine
  timeouts, unavailable, bank at its cap), and Prometheus's own rule manager has them pending or firing. For the
  others the operands of their comparisons (the expression without its thresholds) must return data.

What this test does not make hold, and why (their operands are checked instead):
* EvoHarnessHarnessPositionDrift compares the last hour with the day before it (`[1d] offset 1h`): in a test that
  runs minutes that baseline is empty, so as written its baseline record and volume guard return nothing (asserted
  empty). Over the phase-2 window, with the offset dropped, both sides cover the same samples: every bucket's
  drift is exactly 0, and the volume guards (100 and 1000 calls) do not hold for a handful of calls;
* EvoHarnessHarnessTokensOverBudget needs 10 sessions of more than 8000 harness tokens each;
* EvoHarnessStepLatencyHigh needs a step p99 over 10 s; EvoHarnessInvalidOutputs needs an output the grammar-
  constrained engine cannot produce (its counter is checked to be 0);
* EvoHarnessDown holds only with no target up: checked last, after the server is stopped.
Not covered: 502 (invalid policy output) and 429 (rate limit) answers, and a vLLM pool scraped as its own job
(the engine here is in-process; its vllm:* families come from the service's /metrics).
"""

from __future__ import annotations

import math
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson
import psutil
import pytest
import yaml

from service.bank.evolver import CATEGORIES
from service.embedded_redis import EmbeddedRedis, free_port
from service.harness.state import VERBS
from service.metrics import STATE_BYTES, STEP_SECONDS, position_bucket
from tests.deploy.live_server import live_server_process, stop_server

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "evoharness.rules.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "evoharness.json"
ENGINE_TIMEOUT_S = 5.0
ROOM = ["go to desk 1", "go to drawer 1", "open drawer 1", "look"]
TASK = "Your task is to: put a pen in drawer."
HIDDEN = {"__name__", "job", "instance"}
RANGE = re.compile(r"\[[^\]]+\](?:\s*offset\s+\w+)?")
# the alerts this traffic makes hold (the others: see the module docstring)
HOLDING = {"EvoHarnessHigh5xxRate", "EvoHarnessEngineTimeouts", "EvoHarnessUnavailable",
           "EvoHarnessBankAtCategoryCap"}
# as written, these need a day-old baseline (`[1d] offset 1h`): empty in a test that runs minutes
DAY_OLD_BASELINE = {
    "bucket:evoharness_harness_calls_by_position:share_rate1d_offset1h",
    "sum(increase(evoharness_harness_calls_by_position_total[1d] offset 1h))",
    ("sum by (bucket) (rate(evoharness_harness_calls_by_position_total[1d] offset 1h)) / ignoring (bucket) "
     "group_left sum(rate(evoharness_harness_calls_by_position_total[1d] offset 1h))"),
}


def norm(expr: str) -> str:
    return " ".join(expr.split())


def observation(k: int) -> str:
    return f"You arrive at desk {k}. On the desk {k}, you see a pen 1."


# ---- the traffic and its tallies -------------------------------------------------------------------------------

class Tally:
    """What one phase did, as the API answered it, in the service's label sets."""

    def __init__(self):
        self.c: dict[str, Counter] = {k: Counter() for k in (
            "steps", "calls", "position", "call_seconds", "tokens", "turns", "errors", "ops")}
        self.sessions = 0
        self.steps_with_turns = 0
        self.steps_without_calls = 0
        self.state_bytes: list[int] = []
        # per step, bounds of what the service observes: total seconds >= the answer's usage.total_seconds (taken
        # before the commit) and <= the request's round trip; store seconds <= round trip - usage.total_seconds
        self.total_lo: list[float] = []
        self.total_hi: list[float] = []
        self.store_hi: list[float] = []

    def labelsets(self) -> dict[str, set]:
        return {k: {key for key, n in c.items() if n} for k, c in self.c.items()}

    @property
    def calls(self) -> int:
        return sum(self.c["calls"].values())

    def calls_of(self, verb: str) -> int:
        return sum(n for (v, _), n in self.c["calls"].items() if v == verb)

    def harness_tokens(self) -> int:
        return sum(n for (_, purpose), n in self.c["tokens"].items() if purpose == "harness")

    def add(self, other: Tally) -> None:
        for k, c in other.c.items():
            self.c[k].update(c)
        self.sessions += other.sessions
        self.steps_with_turns += other.steps_with_turns
        self.steps_without_calls += other.steps_without_calls
        self.state_bytes += other.state_bytes
        self.total_lo += other.total_lo
        self.total_hi += other.total_hi
        self.store_hi += other.store_hi


class Driver:
    def __init__(self, url: str, redis: EmbeddedRedis, serve: subprocess.Popen):
        self.url, self.redis, self.serve = url, redis, serve
        self.http = httpx.Client(base_url=url, timeout=120)
        self.k: dict[str, int] = {}          # env steps taken per session
        self.active: set[str] = set()
        self.outages: list[tuple[float, float]] = []   # wall-clock intervals with the redis-server stopped
        self.t = Tally()

    def _error(self, r: httpx.Response, status: int) -> None:
        assert r.status_code == status, (status, r.status_code, r.text)
        self.t.c["errors"][str(status)] += 1

    def create(self, bank: str = "play", **body) -> str:
        r = self.http.post("/v1/sessions", json={"task": TASK, "domain": "alfworld", "bank": bank, **body})
        assert r.status_code == 201, r.text
        sid = r.json()["session_id"]
        self.t.sessions += 1
        self.k[sid] = 0
        self.active.add(sid)
        return sid

    def controls(self, sid: str, **body) -> None:
        r = self.http.patch(f"/v1/sessions/{sid}/controls", json=body)
        assert r.status_code == 200, r.text

    def step(self, sid: str, headers: dict | None = None) -> dict:
        """One step that the service answers 200; tallies its turns from the audit events it wrote."""
        k = self.k[sid] + 1
        t0 = time.perf_counter()
        r = self.http.post(f"/v1/sessions/{sid}/step", json={"observation": observation(k),
                                                               "admissible_actions": ROOM}, headers=headers or {})
        rtt = time.perf_counter() - t0
        assert r.status_code == 200, r.text
        body = r.json()
        self.t.total_lo.append(body["usage"]["total_seconds"] - 1e-6)     # rounded to the microsecond
        self.t.total_hi.append(rtt)
        self.t.store_hi.append(rtt - body["usage"]["total_seconds"] + 1e-6)
        self.k[sid] = k
        events = self.http.get(f"/v1/sessions/{sid}/audit",
                               params={"after": body["version"] - 1 - len(body["turns"]), "limit": 100}).json()
        turns = [e for e in events["events"] if e["kind"] in ("harness", "env")]
        assert [e["kind"] for e in turns] == [t["kind"] for t in body["turns"]] and turns[-1]["kind"] == "env"
        assert sum(e["usage"]["prompt_tokens"] for e in turns) == body["usage"]["prompt_tokens"]
        c = self.t.c
        c["steps"]["ok"] += 1
        calls = 0
        for e in turns:
            purpose = "harness" if e["kind"] == "harness" else "env"
            c["turns"][e["kind"]] += 1
            c["tokens"]["prompt", purpose] += e["usage"]["prompt_tokens"]
            c["tokens"]["completion", purpose] += e["usage"]["completion_tokens"]
            if e["kind"] == "harness":
                calls += 1
                empty = (e["result"] or "").startswith(("no belief", "no experience"))
                c["calls"][e["verb"], "empty" if empty else "ok"] += 1
                c["call_seconds"][e["verb"]] += e["usage"]["seconds"]
                c["position"][position_bucket(k), e["verb"]] += 1
        assert calls == body["usage"]["harness_calls"]
        self.t.steps_with_turns += 1
        self.t.steps_without_calls += calls == 0
        state = self.http.get(f"/v1/sessions/{sid}/state").json()["state"]
        self.t.state_bytes.append(len(orjson.dumps(state)))     # what the service measures: its stored JSON
        body["verbs"] = [t["verb"] for t in body["turns"] if t["kind"] == "harness"]
        return body

    def end(self, sid: str, won: bool) -> None:
        assert self.http.post(f"/v1/sessions/{sid}/end", json={"won": won}).status_code == 200
        self.active.discard(sid)

    # -- the phase's traffic --

    def verbs(self) -> None:
        """Per verb: sessions whose controls allow only that verb (one call per step), until the policy calls it."""
        for verb in VERBS:
            called = False
            for _ in range(12):
                sid = self.create(harness_cap=1)
                self.controls(sid, disabled_verbs=[v for v in VERBS if v != verb])
                for _ in range(4):
                    got = self.step(sid)["verbs"]
                    assert set(got) <= {verb}, f"a disabled verb was called: {got}"
                    if got:
                        called = True
                        break
                if called:
                    break
            assert called, f"the policy never called {verb} in 48 steps"

    def late_calls(self) -> None:
        """Harness calls at steps 5-9 only: no calls for 4 steps (cap 0), then controls allow `commit`."""
        for _ in range(8):
            sid = self.create(harness_cap=0)
            for _ in range(4):
                assert self.step(sid)["verbs"] == []
            self.controls(sid, harness_cap=1, disabled_verbs=[v for v in VERBS if v != "commit"])
            for _ in range(5):
                if self.step(sid)["verbs"]:
                    self.end(sid, won=False)
                    return
            self.end(sid, won=False)
        raise AssertionError("the policy never called commit at steps 5-9 of 8 sessions")

    def errors(self) -> None:
        h = self.http
        self._error(h.get(f"/v1/sessions/{'0' * 32}/state"), 404)
        self._error(h.post("/v1/sessions", json={"task": TASK, "harness_cap": 65}), 422)
        sid = self.create(harness_cap=0)
        self._error(h.post(f"/v1/sessions/{sid}/step", json={"observation": "o" * 16_001}), 413)
        key = {"Idempotency-Key": f"e2e-{sid}"}
        self.step(sid, headers=key)
        r = h.post(f"/v1/sessions/{sid}/step", json={"observation": observation(1), "admissible_actions": ROOM},
                   headers=key)                                        # the same request again: a replay
        assert r.status_code == 200, r.text
        self.t.c["steps"]["replay"] += 1
        self._error(h.post(f"/v1/sessions/{sid}/step", json={"observation": observation(2)},
                           headers={"If-Match": "0"}), 409)            # stale version: a conflict
        self.t.c["steps"]["conflict"] += 1
        assert h.delete(f"/v1/sessions/{sid}").status_code == 204
        self.active.discard(sid)

    def consolidation(self, sessions: int) -> dict:
        for i in range(sessions):
            sid = self.create(bank="evolve")
            if i == 0:                                  # bank controls: the evolve bank's sessions call no verb
                r = self.http.patch("/v1/banks/evolve/controls", json={"disabled_verbs": list(VERBS)})
                assert r.status_code == 200, r.text
            for _ in range(2):
                assert self.step(sid)["verbs"] == []
            self.end(sid, won=True)
        r = self.http.post("/v1/banks/evolve/consolidate")
        assert r.status_code == 200, r.text
        ops = r.json()["ops"]
        assert ops, r.json()
        self.t.c["ops"].update(("evolve", op["op"]) for op in ops)
        return self.http.get("/v1/banks/evolve").json()

    def engine_timeouts(self, n: int) -> None:
        """n steps at once while the vLLM engine core is stopped: each ends in 504 after ENGINE_TIMEOUT_S."""
        sids = [self.create() for _ in range(n)]
        (core,) = [p for p in psutil.Process(self.serve.pid).children(recursive=True)
                   if "EngineCore" in " ".join(p.cmdline())]
        core.send_signal(signal.SIGSTOP)
        try:
            with ThreadPoolExecutor(n) as pool:
                rs = list(pool.map(lambda sid: httpx.post(
                    f"{self.url}/v1/sessions/{sid}/step", timeout=60,
                    json={"observation": observation(1), "admissible_actions": ROOM}), sids))
        finally:
            core.send_signal(signal.SIGCONT)
        for r in rs:
            self._error(r, 504)

    def redis_outage(self, probes: int) -> None:
        """/readyz `probes` times with the redis-server stopped (503 each), then Redis back (append-only file)."""
        down = time.time()
        self.redis.stop()
        try:
            for _ in range(probes):
                self._error(self.http.get("/readyz"), 503)
        finally:
            self.redis.start()
            self.outages.append((down, time.time()))
        deadline = time.monotonic() + 30
        while (r := self.http.get("/readyz")).status_code != 200:
            self._error(r, 503)
            assert time.monotonic() < deadline, r.text
            time.sleep(0.2)

    def phase(self, final: bool) -> tuple[Tally, dict]:
        self.t = Tally()
        self.verbs()
        self.late_calls()
        self.errors()
        bank = self.consolidation(sessions=1 if final else 2)
        self.engine_timeouts(3 if final else 1)
        self.redis_outage(12 if final else 1)
        return self.t, bank


# ---- Prometheus --------------------------------------------------------------------------------------------------

class Prom:
    def __init__(self, url: str):
        self.http = httpx.Client(base_url=url, timeout=30)

    def query(self, expr: str, at: float | None = None) -> dict[frozenset, float]:
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        body = self.http.get("/api/v1/query", params=params).json()
        assert body["status"] == "success", (expr, body)
        data = body["data"]
        if data["resultType"] == "scalar":
            return {frozenset(): float(data["result"][1])}
        return {frozenset((k, v) for k, v in s["metric"].items() if k not in HIDDEN): float(s["value"][1])
                for s in data["result"]}

    def scrape_after(self, t: float, timeout_s: float = 30) -> float:
        """The timestamp of the first successful scrape of the service that started after wall time t."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = self.query("timestamp(evoharness_sessions_created_total)")
            if got and (ts := next(iter(got.values()))) > t:
                return ts
            time.sleep(0.2)
        raise AssertionError(f"no successful scrape after {t} in {timeout_s} s")

    def rules_evaluated_after(self, t: float, timeout_s: float = 30) -> float:
        """The time of the first evaluation of the rule groups after t (their records include t's samples)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = self.query("timestamp(evoharness_harness_tokens_per_session:budget)")
            if got and (te := next(iter(got.values()))) > t + 0.5:    # T's scrape ingested by then
                return te
            time.sleep(0.2)
        raise AssertionError("the rule groups were not evaluated")


@contextmanager
def prometheus(tmp: Path, target: str):
    """`prometheus` with the compose config's evoharness job pointed at `target`, 1 s scrapes and rule evaluations,
    and the real rule file."""
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.fail("prometheus not found on PATH: install the Debian package `prometheus` (scripts/system_deps.sh)")
    compose = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (job,) = [j for j in compose["scrape_configs"] if j["job_name"] == "evoharness"]
    job["static_configs"] = [{"targets": [target]}]
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
              "rule_files": [str(RULES)], "scrape_configs": [job]}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(tmp / "prometheus.log", "w") as log:
        proc = subprocess.Popen([exe, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, (tmp / "prometheus.log").read_text()[-3000:]
                try:
                    if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "prometheus not ready in 60 s"
                time.sleep(0.2)
            yield Prom(url)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


# ---- PromQL handling ---------------------------------------------------------------------------------------------

def rule_list() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def board_exprs() -> list[str]:
    import json

    return [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]


def windowed(expr: str, window_ms: int) -> str:
    """Every range (and its offset) replaced by the phase-2 window."""
    return RANGE.sub(f"[{window_ms}ms]", expr)


def inline_records(expr: str, records: list[dict]) -> str:
    """Recorded series replaced by their expressions (a selector's matchers pick among same-named records)."""
    for name in {r["record"] for r in records}:
        def expand(m, name=name):
            want = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
            (r,) = [r for r in records if r["record"] == name and want.items() <= r.get("labels", {}).items()]
            return f"({inline_records(r['expr'], records)})"
        expr = re.sub(rf"(?<![\w:]){re.escape(name)}(?![\w:])(\{{[^}}]*\}})?", expand, expr)
    return expr


def record_expr(selector: str, records: list[dict]) -> str | None:
    """The expression of the recording rule a lone selector (`name` or `name{label="v"}`) reads, else None."""
    m = re.fullmatch(r"([\w:]+)(\{[^}]*\})?", selector.strip())
    if m is None or not any(r["record"] == m.group(1) for r in records):
        return None
    return inline_records(selector, records)[1:-1]


_OPERATOR = re.compile(r"\s(?:and|or|unless)\s|==|!=|>=|<=|>|<")
_MODIFIER = re.compile(r"^\s*(?:bool\s+)?(?:(?:on|ignoring)\s*\([^)]*\)\s*)?(?:(?:group_left|group_right)\s*"
                       r"(?:\([^)]*\))?\s*)?")


def operands(expr: str) -> list[str]:
    """The operands of an expression's top-level set and comparison operators, numbers dropped: an alert
    without its thresholds."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(expr):
        ch = expr[i]
        if ch == '"':
            i = expr.index('"', i + 1) + 1
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        m = _OPERATOR.match(expr, i) if depth == 0 else None
        if m:
            parts.append(expr[start:i])
            start = i = m.end()
            continue
        i += 1
    parts.append(expr[start:])
    parts = [norm(_MODIFIER.sub("", p)) for p in parts]
    return [p for p in parts if not re.fullmatch(r"[\d.]+", p)]


def histogram_quantile(q: float, values: list[float], bounds: list[float]) -> float:
    """Prometheus's histogram_quantile over the buckets the values fall in."""
    counts = [sum(v <= b for v in values) for b in bounds]
    rank = q * counts[-1]
    i = next(i for i, c in enumerate(counts) if c >= rank)
    if math.isinf(bounds[i]):
        return bounds[-2]
    lo, below = (0.0, 0) if i == 0 else (bounds[i - 1], counts[i - 1])
    return lo + (bounds[i] - lo) * (rank - below) / (counts[i] - below)


# ---- what each expression must give over the phase-2 window ---------------------------------------------------

def L(**labels) -> frozenset:
    return frozenset(labels.items())


def expected(p: Tally, before: Tally, s: float, bank: dict, active: int) -> dict[str, dict | object]:
    """normalized expression ([W] for its ranges) -> {labels: value}, or a check(result) for quantiles and gauges
    the test cannot know exactly. `p`: phase 2; `before`: what happened before it (which series exist); `s`: the
    window in seconds."""
    seen = before.labelsets()
    verbs = {v for v, _ in seen["calls"]}
    buckets = {b for b, _ in seen["position"]}
    per_category = Counter(e["category"] for e in bank["entries"].values())
    step_answers = sum(p.c["steps"].values())
    e5xx = sum(n for st, n in p.c["errors"].items() if st.startswith("5"))
    shares = {L(bucket=b): sum(n for (bb, _), n in p.c["position"].items() if bb == b) / p.calls for b in buckets}

    def between(q: float, lo: list[float], hi: list[float]):
        """histogram_quantile grows with every observation: bounds on each observation bound the quantile."""
        def check(got):
            (v,) = got.values()
            low, high = histogram_quantile(q, lo, bounds), histogram_quantile(q, hi, bounds)
            assert low - 1e-6 - 2e-4 * low <= v <= high + 1e-6 + 2e-4 * high, (v, low, high)   # close()'s tolerance
        return check

    bounds = STEP_SECONDS._upper_bounds

    return {
        # the board (and its recording rules)
        'sum by (verb) (rate(evoharness_harness_calls_total[W])) / scalar(sum(rate(evoharness_steps_total'
        '{outcome="ok"}[W])))': {L(verb=v): p.calls_of(v) / p.c["steps"]["ok"] for v in verbs},
        '1 - sum(rate(evoharness_harness_calls_per_step_bucket{le="0.0"}[W])) / sum(rate('
        'evoharness_harness_calls_per_step_count[W]))': {L(): 1 - p.steps_without_calls / p.steps_with_turns},
        'sum(rate(evoharness_tokens_total{purpose="harness"}[W])) / sum(rate(evoharness_harness_calls_total[W]))':
            {L(): p.harness_tokens() / p.calls},
        'sum by (kind) (rate(evoharness_tokens_total{purpose="harness"}[W])) / scalar(sum(rate('
        'evoharness_harness_calls_total[W])))': {L(kind=k): p.c["tokens"][k, "harness"] / p.calls
                                                for k in ("prompt", "completion")},
        'sum by (verb) (rate(evoharness_harness_call_seconds_sum[W])) / sum by (verb) (rate('
        'evoharness_harness_call_seconds_count[W]))': {L(verb=v): p.c["call_seconds"][v] / p.calls_of(v)
                                                       for v in verbs},
        'sum by (bucket) (rate(evoharness_harness_calls_by_position_total[W]))':
            {b: share * p.calls / s for b, share in shares.items()},
        'histogram_quantile(0.5, sum by (le) (rate(evoharness_state_bytes_bucket[W])))':
            {L(): histogram_quantile(0.5, p.state_bytes, STATE_BYTES._upper_bounds)},
        'histogram_quantile(0.99, sum by (le) (rate(evoharness_state_bytes_bucket[W])))':
            {L(): histogram_quantile(0.99, p.state_bytes, STATE_BYTES._upper_bounds)},
        'sum(rate(evoharness_state_bytes_sum[W])) / sum(rate(evoharness_state_bytes_count[W]))':
            {L(): sum(p.state_bytes) / len(p.state_bytes)},
        'max by (bank, category) (evoharness_bank_entries)':
            {L(bank="evolve", category=c): per_category[c] for c in CATEGORIES},
        'sum by (bank, op) (increase(evoharness_consolidation_ops_total[W]))':
            {L(bank=b, op=op): p.c["ops"][b, op] for b, op in seen["ops"]},
        'histogram_quantile(0.5, sum by (le) (rate(evoharness_step_seconds_bucket{part="total"}[W])))':
            between(0.5, p.total_lo, p.total_hi),
        'histogram_quantile(0.99, sum by (le) (rate(evoharness_step_seconds_bucket{part="total"}[W])))':
            between(0.99, p.total_lo, p.total_hi),
        'histogram_quantile(0.99, sum by (le) (rate(evoharness_step_seconds_bucket{part="store"}[W])))':
            between(0.99, [0.0] * len(p.store_hi), p.store_hi),
        'sum by (outcome) (rate(evoharness_steps_total[W]))':
            {L(outcome=o): p.c["steps"][o] / s for o in seen["steps"]},
        'max(evoharness_active_sessions)': {L(): active},
        'sum by (status) (rate(evoharness_http_errors_total[W]))':
            {L(status=st): p.c["errors"][st] / s for st in seen["errors"]},
        'sum(rate(evoharness_invalid_outputs_total[W]))': {L(): 0.0},
        # the in-process engine generated exactly the tokens the steps' usage reports (504'd requests: none)
        'sum(rate(vllm:generation_tokens_total[W]))': {L(): sum(n for (k, _), n in p.c["tokens"].items()
                                                             if k == "completion") / s},
        'sum(rate(vllm:prompt_tokens_total[W]))': {L(): sum(n for (k, _), n in p.c["tokens"].items()
                                                         if k == "prompt") / s},
        'avg(vllm:kv_cache_usage_perc)': lambda got: 0 <= next(iter(got.values())) <= 1 and len(got) == 1,
        'sum(vllm:num_requests_running)': {L(): 0.0},        # idle at T: the 504'd requests were aborted
        'sum(vllm:num_requests_waiting)': {L(): 0.0},
        'sum(evoharness_admission_running)': {L(): 0.0},      # idle at T: every step gave its slot back
        'sum(evoharness_admission_waiting)': {L(): 0.0},
        # the alert group's records
        'sum(rate(evoharness_http_errors_total{status=~"5.."}[W])) / (sum(rate(evoharness_http_errors_total'
        '{status=~"5.."}[W])) + (sum(rate(evoharness_steps_total[W])) or vector(0)))':
            {L(): e5xx / (e5xx + step_answers)},
        'sum(increase(evoharness_tokens_total{purpose="harness"}[W])) / sum(increase('
        'evoharness_sessions_created_total[W]))': {L(): p.harness_tokens() / p.sessions},
        'vector(8000)': {L(): 8000.0},
        'sum by (bucket) (rate(evoharness_harness_calls_by_position_total[W])) / ignoring (bucket) group_left '
        'sum(rate(evoharness_harness_calls_by_position_total[W]))': shares,
        # the alerts' operands (recorded series are looked up by their expressions)
        'abs( (bucket:evoharness_harness_calls_by_position:share_rate1h or 0 * '
        'bucket:evoharness_harness_calls_by_position:share_rate1d_offset1h) - '
        '(bucket:evoharness_harness_calls_by_position:share_rate1d_offset1h or 0 * '
        'bucket:evoharness_harness_calls_by_position:share_rate1h) )': {b: 0.0 for b in shares},
        'sum(increase(evoharness_harness_calls_by_position_total[W]))': {L(): p.calls},
        'sum(increase(evoharness_sessions_created_total[W]))': {L(): p.sessions},
        'sum(increase(evoharness_http_errors_total{status="504"}[W]))': {L(): p.c["errors"]["504"]},
        'sum(increase(evoharness_http_errors_total{status="503"}[W]))': {L(): p.c["errors"]["503"]},
        'sum(increase(evoharness_invalid_outputs_total[W]))': {L(): 0.0},
        'max by (bank, category) (evoharness_bank_category_cap)': {L(bank="evolve", category=c): 1.0
                                                                   for c in CATEGORIES},
        'up{job="evoharness"}': {L(): 1.0},
    }


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=2e-4, abs_tol=1e-6)


def why_not(got: dict, check) -> str:
    """What a check of a quantile or gauge said about `got` (its assertion's message)."""
    try:
        check(got)
    except (AssertionError, ValueError, StopIteration) as e:
        return f"{check.__qualname__.split('.<locals>')[0]}: {type(e).__name__} {e}"
    return "a pass"


def matches(got: dict, want) -> bool:
    if callable(want):
        try:
            return want(got) is not False
        except (AssertionError, ValueError, StopIteration):
            return False
    return got.keys() == want.keys() and all(close(got[k], want[k]) for k in want)


# ---- the test ----------------------------------------------------------------------------------------------------

def test_board_and_rules_against_a_real_prometheus(tiny_model, tmp_path):
    t_start = time.monotonic()
    records = [r for r in rule_list() if "record" in r]
    alerts = {r["alert"]: r for r in rule_list() if "alert" in r}
    with EmbeddedRedis(appendonly=True) as redis, live_server_process(
            tiny_model, tmp_path / "serve.log", REDIS_URL=redis.url, EVOHARNESS_TEMPERATURE="2.0",
            EVOHARNESS_BANK_CAP="1", EVOHARNESS_ENGINE_TIMEOUT_S=str(ENGINE_TIMEOUT_S)) as (url, serve), \
            prometheus(tmp_path, url.removeprefix("http://")) as prom:
        t0 = prom.scrape_after(time.time())               # the families before any traffic
        drive = Driver(url, redis, serve)
        before, _ = drive.phase(final=False)
        total = Tally()
        total.add(before)
        for attempt in range(3):                           # phase 2, until it made no label set phase 1 did not
            ts = prom.scrape_after(time.time())
            p2, bank = drive.phase(final=True)
            total.add(p2)
            new = {k: v - before.labelsets()[k] for k, v in p2.labelsets().items() if v - before.labelsets()[k]}
            if not new:
                break
            print(f"phase 2 attempt {attempt}: new label sets {new}; again after another scrape")
            before.add(p2)
        else:
            pytest.fail(f"phase 2 kept making new label sets: {new}")
        t_end = prom.scrape_after(time.time())
        active = len(drive.active)
        # /metrics does not need Redis (it is not rate-limited): no scrape may fail during the Redis outages
        ups = prom.http.get("/api/v1/query", params={
            "query": f'up{{job="evoharness"}}[{round((t_end - t0) * 1000) + 1}ms]', "time": f"{t_end:.3f}"}).json()
        failed = [float(t) for t, v in ups["data"]["result"][0]["values"]
                  if v == "0" and any(a - 1 <= float(t) <= b + 1 for a, b in drive.outages)]
        assert not failed, f"scrapes failed during the Redis outages at {failed}"
        s = t_end - ts
        # exactly ts..T: Prometheus 2.x ranges include both ends, so the scrape at ts is the range's first sample and
        # rate() extrapolates nothing (with a longer range it extrapolates each series alone, and a bucket that was
        # 0 at ts less than the others: a quantile off by ~1e-5 of its value, outside the bounds; CI, session 16)
        window_ms = round(s * 1000)
        want = expected(p2, before, s, bank, active)
        problems = []

        def check(name: str, expr: str, as_written: str | None = None, at: float | None = None) -> None:
            """`as_written` (default expr): evaluated at `at` (default T), must return finite data; expr over the
            phase-2 window must give the expected values."""
            written = prom.query(as_written or expr, at or t_end)
            if not written or not all(math.isfinite(v) for v in written.values()):
                problems.append(f"{name}: as written `{as_written or expr}` gave {written or 'no data'}")
            key = norm(RANGE.sub("[W]", record_expr(expr, records) or expr))
            if key not in want:
                problems.append(f"{name}: no expectation for `{key}` (add one to expected())")
                return
            got = prom.query(windowed(inline_records(expr, records), window_ms), t_end)
            if not matches(got, want[key]):
                problems.append(f"{name}: `{expr}` over the phase-2 window gave {dict(got)}, expected "
                                f"{why_not(got, want[key]) if callable(want[key]) else want[key]}")
            elif not callable(want[key]) and written.keys() != got.keys():
                problems.append(f"{name}: as written gave label sets {set(written)}, expected {set(got)}")

        # 1. every board expression ($__rate_interval = 5m as written)
        board = board_exprs()
        assert len(board) >= 20
        for expr in board:
            check("board", expr, expr.replace("$__rate_interval", "5m"))

        # 2. every recording rule's expression, and its recorded series once Prometheus evaluated the rules
        for r in records:
            name = r["record"] + str(r.get("labels", ""))
            if norm(r["expr"]) in DAY_OLD_BASELINE:
                assert not prom.query(r["expr"], t_end), f"{name}: a day-old baseline in a minutes-old Prometheus?"
                check(name, r["expr"], RANGE.sub("[5m]", r["expr"]))     # as written but for its offset
            else:
                check(name, r["expr"])
            if r["record"] not in DAY_OLD_BASELINE:
                got = prom.query(r["record"] + "{" + ",".join(f'{k}="{v}"' for k, v in r.get("labels", {}).items())
                                 + "}", prom.rules_evaluated_after(t_end))
                if not got or not all(math.isfinite(v) for v in got.values()):
                    problems.append(f"{name}: Prometheus recorded {got or 'no data'}")

        # 3. every alert: as written it returns data iff this traffic makes it hold; its operands return data.
        # As written at t_rules, the first rule evaluation after T: the records the alerts read then include T's
        # samples (the 503s of an outage reach Prometheus only with the first scrape after it: see above)
        t_rules = prom.rules_evaluated_after(t_end)
        for name, a in alerts.items():
            if name == "EvoHarnessDown":
                continue                                       # below, once the server is stopped
            held = prom.query(a["expr"], t_rules)
            if bool(held) != (name in HOLDING):
                problems.append(f"{name}: as written gave {held or 'no data'}; expected it to "
                                f"{'hold' if name in HOLDING else 'not hold'}")
            got = prom.query(windowed(inline_records(a["expr"], records), window_ms), t_end)
            if bool(got) != (name in HOLDING):
                problems.append(f"{name}: over the phase-2 window gave {got or 'no data'}")
            for part in operands(a["expr"]):
                if part in DAY_OLD_BASELINE:
                    assert not prom.query(part, t_rules), part
                    check(f"{name} operand", part, RANGE.sub("[5m]", part), at=t_rules)
                else:
                    check(f"{name} operand", part, at=t_rules)
        bank_cap = prom.query(alerts["EvoHarnessBankAtCategoryCap"]["expr"], t_rules)
        if bank_cap != {L(bank="evolve", category="search_priority"): 1.0}:
            problems.append(f"EvoHarnessBankAtCategoryCap: {bank_cap}")
        deadline = time.monotonic() + 20                       # Prometheus's rule manager agrees
        while (active_alerts := {x["labels"]["alertname"]: x["state"] for x in
                                 prom.http.get("/api/v1/alerts").json()["data"]["alerts"]}).keys() != HOLDING:
            if time.monotonic() > deadline:
                problems.append(f"active alerts {active_alerts}, expected {HOLDING}")
                break
            time.sleep(0.5)
        health = {r.get("name"): (r["health"], r.get("lastError")) for g in
                  prom.http.get("/api/v1/rules").json()["data"]["groups"] for r in g["rules"]}
        assert all(h == ("ok", "") or h == ("ok", None) for h in health.values()), health

        # 4. the raw families at T minus before any traffic: the whole run's tallies
        def delta(expr: str) -> dict:
            a, b = prom.query(expr, t_end), prom.query(expr, t0)
            return {k: v - b.get(k, 0.0) for k, v in a.items() if v - b.get(k, 0.0)}

        def tally(counter: Counter, *names: str) -> dict:
            return {frozenset(zip(names, k if isinstance(k, tuple) else (k,))): float(n)
                    for k, n in counter.items() if n}

        c = total.c
        raw = {
            "sum by (verb, outcome) (evoharness_harness_calls_total)": tally(c["calls"], "verb", "outcome"),
            "sum by (bucket, verb) (evoharness_harness_calls_by_position_total)": tally(c["position"], "bucket",
                                                                                       "verb"),
            "sum by (kind) (evoharness_turns_total)": tally(c["turns"], "kind"),
            "sum by (kind, purpose) (evoharness_tokens_total)": tally(c["tokens"], "kind", "purpose"),
            "sum by (outcome) (evoharness_steps_total)": tally(c["steps"], "outcome"),
            "sum by (status) (evoharness_http_errors_total)": tally(c["errors"], "status"),
            "sum by (bank, op) (evoharness_consolidation_ops_total)": tally(c["ops"], "bank", "op"),
            "sum by (verb) (evoharness_harness_call_seconds_count)": tally(
                Counter({v: total.calls_of(v) for v in VERBS}), "verb"),
            "sum(evoharness_sessions_created_total)": {L(): total.sessions},
            "sum(evoharness_harness_calls_per_step_count)": {L(): total.steps_with_turns},
            "sum(evoharness_harness_calls_per_step_sum)": {L(): total.calls},
            'sum(evoharness_harness_calls_per_step_bucket{le="0.0"})': {L(): total.steps_without_calls},
            "sum by (part) (evoharness_step_seconds_count)": {L(part=x): c["steps"]["ok"]
                                                             for x in ("model", "store", "total")},
            "sum(evoharness_state_bytes_count)": {L(): len(total.state_bytes)},
            "sum(evoharness_state_bytes_sum)": {L(): sum(total.state_bytes)},
        }
        for expr, exp in raw.items():
            got = delta(expr)
            if not matches(got, exp):
                problems.append(f"raw `{expr}`: {dict(got)}, the test did {exp}")
        seconds = delta("sum by (verb) (evoharness_harness_call_seconds_sum)")
        for v in VERBS:
            if not math.isclose(seconds.get(L(verb=v), 0.0), c["call_seconds"][v], abs_tol=1e-4):
                problems.append(f"harness seconds of {v}: {seconds}, audit says {c['call_seconds'][v]}")

        # 5. EvoHarnessDown: holds once no target is up
        stop_server(serve)
        down_from = time.time()
        deadline = time.monotonic() + 30
        while prom.query('up{job="evoharness"}') != {L(): 0.0} or prom.query(
                'timestamp(up{job="evoharness"})')[L()] < down_from:
            assert time.monotonic() < deadline, "Prometheus did not see the service go"
            time.sleep(0.3)
        down = prom.query(alerts["EvoHarnessDown"]["expr"])
        if down != {L(): 1.0}:
            problems.append(f"EvoHarnessDown with the service stopped: {down or 'no data'}")
        if prom.query(alerts["EvoHarnessDown"]["expr"], t_end):
            problems.append("EvoHarnessDown held while the service was up")

    print(f"phase 2 window {s:.1f} s: {p2.calls} harness calls {dict(p2.c['calls'])}, {p2.c['steps']['ok']} steps, "
          f"errors {dict(p2.c['errors'])} "
          f"ops {dict(p2.c['ops'])}; whole test {time.monotonic() - t_start:.0f} s")
    assert not problems, "\n".join(problems)
