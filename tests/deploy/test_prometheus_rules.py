"""deploy/prometheus/evoharness.rules.yml, checked by the real `promtool` (Debian package `prometheus`): the rules
and the compose Prometheus config load, the unit tests in tests/deploy/promtool/ pass and show every alert both
firing and quiet (and fail when an alert is broken), compose and k8s load the same rules, and every metric and
label the rules name is one the service declares."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from service import metrics
from tests.deploy.promql import label_names, metric_names

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "evoharness.rules.yml"
UNIT_TESTS = sorted((Path(__file__).parent / "promtool").glob("*.test.yml"))
TARGET_LABELS = {"job", "instance"}  # added by the scrape to every series


def promtool(*args) -> subprocess.CompletedProcess:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool not found on PATH: install the Debian package `prometheus` "
                    "(apt-get install prometheus; .ci/run does)")
    return subprocess.run([exe, *map(str, args)], check=False, capture_output=True, text=True, timeout=300)


def groups() -> list[dict]:
    return yaml.safe_load(RULES.read_text())["groups"]


def rules() -> list[dict]:
    return [r for g in groups() for r in g["rules"]]


def alerts() -> dict[str, dict]:
    return {r["alert"]: r for r in rules() if "alert" in r}


def test_promtool_accepts_the_rules_and_the_compose_config():
    assert UNIT_TESTS and len(alerts()) >= 8
    r = promtool("check", "rules", RULES)
    assert r.returncode == 0, r.stdout + r.stderr
    r = promtool("check", "config", DEPLOY / "prometheus" / "prometheus.yml")   # loads rule_files too
    assert r.returncode == 0 and f"SUCCESS: {len(rules())} rules found" in r.stdout, r.stdout + r.stderr


def test_rule_unit_tests_pass():
    r = promtool("test", "rules", *UNIT_TESTS)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(UNIT_TESTS)


def test_every_alert_is_shown_to_fire_and_to_stay_quiet():
    fired, quiet = set(), set()
    for f in UNIT_TESTS:
        for case in yaml.safe_load(f.read_text())["tests"]:
            for t in case.get("alert_rule_test", []):
                (fired if t["exp_alerts"] else quiet).add(t["alertname"])
    assert fired == set(alerts()), f"alerts never shown firing: {set(alerts()) - fired}"
    assert quiet == set(alerts()), f"alerts never shown quiet: {set(alerts()) - quiet}"


@pytest.mark.parametrize("broken, unmet", [("vector(0) > 1", "got:[]"), ("vector(1)", "exp:[]")])
def test_each_alerts_unit_tests_catch_a_broken_rule(tmp_path, broken, unmet):
    """Every alert's expression replaced by one that never fires (each alert's firing case must fail: got:[]) or
    always fires (each alert's quiet case must fail: exp:[])."""
    doc = yaml.safe_load(RULES.read_text())
    for r in (r for g in doc["groups"] for r in g["rules"] if "alert" in r):
        r["expr"] = broken
    mutated = tmp_path / "rules.yml"
    mutated.write_text(yaml.safe_dump(doc))
    copies = []
    for f in UNIT_TESTS:
        t = yaml.safe_load(f.read_text())
        t["rule_files"] = [str(mutated)]
        copies.append(tmp_path / f.name)
        copies[-1].write_text(yaml.safe_dump(t))
    r = promtool("test", "rules", *copies)
    assert r.returncode != 0
    failures = (r.stdout + r.stderr).split("alertname: ")[1:]
    caught = {f.split(",")[0] for f in failures if unmet in f}
    assert caught == set(alerts()), f"no failure with {unmet} for: {set(alerts()) - caught}"


def test_compose_mounts_the_rule_files_its_config_loads():
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    svc = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]["prometheus"]
    config_file = next(a for a in svc["command"] if a.startswith("--config.file=")).split("=", 1)[1]
    mounts = {target: src for src, target, *_ in (v.split(":") for v in svc["volumes"] if v.startswith("./"))}
    assert config["rule_files"] == [RULES.name]
    for f in config["rule_files"]:
        src = mounts[str(Path(config_file).parent / f)]
        assert (DEPLOY / src).resolve() == RULES


def test_k8s_prometheusrule_is_the_rule_file():
    manifest = DEPLOY / "k8s" / "prometheusrule.yaml"
    (doc,) = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "evoharness"
    assert doc["spec"] == yaml.safe_load(RULES.read_text()), "rerun: python scripts/gen_prometheusrule.py"
    r = subprocess.run([sys.executable, ROOT / "scripts" / "gen_prometheusrule.py", "--check"],
                       check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_recording_rules_mirror_the_boards_heavy_expressions():
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "evoharness.json").read_text())
    board = {t["expr"] for p in dash["panels"] for t in p["targets"]}
    (mirror,) = [g["rules"] for g in groups() if g["name"] == "evoharness-board"]
    recorded = {r["expr"].replace("[5m]", "[$__rate_interval]") for r in mirror}
    assert recorded <= board, f"not a board expression: {recorded - board}"
    heavy = {e for e in board if "histogram_quantile" in e or " / " in e}
    assert heavy <= recorded, f"heavy board expressions not recorded: {heavy - recorded}"


def declared_series() -> dict[str, set[str]]:
    """Every series name the service's families export, with its labels."""
    out = {"up": set()}   # Prometheus's own, per target
    for m in vars(metrics).values():
        if isinstance(m, MetricWrapperBase):
            labels = set(m._labelnames)
            suffixes = {"counter": {"_total": labels}, "gauge": {"": labels},
                        "histogram": {"_bucket": labels | {"le"}, "_sum": labels, "_count": labels}}[m._type]
            out |= {m._name + s: ls for s, ls in suffixes.items()}
    return out


def test_promql_reader():
    assert metric_names('sum(rate(a_total{x="y"}[1d] offset 1h)) / ignoring (b) group_left c:d') == {
        "a_total", "c:d"}
    assert label_names('sum by (verb) (x{part="total", le!="1"}) and on (bank) y') == {"verb", "part", "le", "bank"}


def test_rules_name_only_declared_series_and_labels():
    series = declared_series()
    assert {"evoharness_sessions_created_total", "evoharness_bank_category_cap"} <= set(series)
    for r in rules():                                    # in file order: a recorded series is defined before use
        names = metric_names(r["expr"])
        unknown = names - set(series)
        assert not unknown, f"{r.get('record') or r['alert']} names series nobody exports: {unknown}"
        have = set().union(*(series[n] for n in names)) | TARGET_LABELS
        used = label_names(r["expr"]) | set(re.findall(r"\$labels\.(\w+)", json.dumps(r.get("annotations", {}))))
        assert used <= have, f"{r.get('record') or r['alert']} uses labels its series lack: {used - have}"
        if "record" in r:
            series[r["record"]] = series.get(r["record"], set()) | have | set(r.get("labels", {}))


def test_operations_doc_lists_every_alert_with_its_for():
    doc = (ROOT / "docs" / "operations.md").read_text()
    for name, a in alerts().items():
        (row,) = [line for line in doc.splitlines() if line.startswith("|") and f"`{name}`" in line]
        assert a.get("for", "-") in row, f"docs/operations.md: {name} row does not say `for` {a.get('for')}"
