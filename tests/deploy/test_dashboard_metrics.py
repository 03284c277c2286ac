"""Every PromQL expression of the Grafana dashboard names metrics that a running service exports: a real
`evoharness serve` (tiny model, in-process vLLM) is driven through steps, an end and a consolidation, then the
metric names of each expression are looked up in its /metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

from service.client import EvoHarnessClient
from tests.deploy.live_server import live_server
from tests.deploy.promql import metric_names

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "dashboards" / "evoharness.json"
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def exported(text: str) -> set[str]:
    names = set(re.findall(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{| )", text, re.M))
    for family in re.findall(r"^# TYPE (\S+) ", text, re.M):     # labelled families with no sample yet
        names |= {family} | {family + s for s in SUFFIXES}
    return names


def test_parser_reads_promql():
    assert metric_names('sum by (verb) (rate(a_total{x="y(z)"}[5m])) / scalar(sum(rate(b:c[1m])))') == {
        "a_total", "b:c"}
    assert metric_names('histogram_quantile(0.99, sum by (le) (rate(h_bucket{part="total"}[5m])))') == {"h_bucket"}


def test_every_dashboard_metric_exists(tiny_model, tmp_path):
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]
    assert len(exprs) >= 20
    with live_server(tiny_model, tmp_path / "serve.log") as url, EvoHarnessClient(url) as evo:
        room = ["go to desk 1", "go to drawer 1", "open drawer 1", "look"]
        sid = evo.create_session("Your task is to: put a pen in drawer.", domain="alfworld", harness_cap=2).session_id
        for i in range(3):
            evo.step(sid, f"You arrive at desk {i + 1}. On the desk {i + 1}, you see a pen 1.", room)
        evo.end(sid, won=True)
        evo.consolidate("default")
        try:
            evo.state("0" * 32)
        except Exception:  # noqa: BLE001 - a 404 feeds the error counter
            pass
        text = __import__("httpx").get(f"{url}/metrics").text
    have = exported(text)
    missing = {n: e for e in exprs for n in metric_names(e) if n not in have}
    assert not missing, f"dashboard names metrics the service does not export: {missing}"
    assert any(n.startswith("vllm:") for e in exprs for n in metric_names(e))
