"""deploy/ and the Dockerfile, checked without Docker: every file parses, and ports, commands, names and
paths agree across the Dockerfile, compose, Prometheus, Grafana provisioning and the k8s manifests."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from urllib.parse import urlparse

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PORT = 8000


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def k8s() -> list[dict]:
    docs = []
    for f in sorted((DEPLOY / "k8s").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return docs


def by_kind(kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in k8s() if d["kind"] == kind}


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_dockerfile_installs_like_make_and_ci():
    docker = (ROOT / "Dockerfile").read_text()
    runs = " ".join(re.findall(r"^RUN (.*(?:\\\n.*)*)", docker, re.M))
    assert "scripts/setup_venv.sh /opt/venv ${EXTRAS}" in runs            # the one installer
    assert "scripts/setup_venv.sh" in (ROOT / "Makefile").read_text()
    assert "pip install" not in runs                                      # nothing installed on the side
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert re.search(r"^ARG VARIANT=gpu$", docker, re.M) and {"gpu", "cpu"} <= set(extras)
    assert "build-essential" in docker                                    # README: needs a C/C++ toolchain
    py = re.search(r"ARG PYTHON_VERSION=(\d+)\.(\d+)", docker).groups()
    assert tuple(map(int, py)) >= (3, 11)
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", docker, re.M).group(1))
    assert cmd[:2] == ["evoharness", "serve"] and flag(cmd, "--port") == str(PORT) and flag(cmd, "--host") == "0.0.0.0"
    assert f"EXPOSE {PORT}" in docker and f"127.0.0.1:{PORT}/healthz" in docker
    for copied in re.findall(r"^COPY (\S+)", docker, re.M):
        assert (ROOT / copied).exists(), copied
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert not {"service", "training", "scripts"} & set(ignored)


def test_compose_ports_commands_and_volumes_agree():
    c = compose()
    svc = c["services"]
    ev = svc["evoharness"]
    assert ev["build"]["context"] == ".." and (DEPLOY / ".." / ev["build"]["dockerfile"]).exists()
    assert flag(ev["command"], "--port") == str(PORT) and ev["ports"] == [f"{PORT}:{PORT}"]
    assert f":{PORT}/readyz" in " ".join(ev["healthcheck"]["test"])
    redis_url = urlparse(ev["environment"]["REDIS_URL"])
    assert redis_url.hostname == "redis"
    r = svc["redis"]
    assert flag(r["command"], "--port") == str(redis_url.port) and f"{redis_url.port}:{redis_url.port}" in r["ports"]
    assert flag(r["command"], "--appendonly") == "yes" and any(v.endswith(":/data") for v in r["volumes"])
    # the pool: every vLLM server serves the policy under the path the service's remote engine asks for
    model = ev["environment"]["EVOHARNESS_MODEL"]
    pool = [n for n in svc if n.startswith("vllm-")]
    assert len(pool) >= 2
    for n in pool:
        s = {**svc["vllm-0"], **svc[n]}
        assert s["profiles"] == ["pool"] and flag(s["command"], "--model") == model
        assert flag(s["command"], "--port") == str(PORT)
        assert any(v["target"] == model for v in s["volumes"])
    assert any(v["target"] == model for v in ev["volumes"])
    # Prometheus scrapes what compose runs
    prom_svc = svc["prometheus"]
    mounts = dict(v.split(":")[:2] for v in prom_svc["volumes"] if v.startswith("./"))
    config = [a for a in prom_svc["command"] if a.startswith("--config.file=")][0].split("=", 1)[1]
    assert mounts["./prometheus/prometheus.yml"] == config
    prom = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text())
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    assert f"evoharness:{PORT}" in targets and {f"{n}:{PORT}" for n in pool} <= targets
    for t in targets:
        assert t.split(":")[0] in svc
    listen = [a for a in prom_svc["command"] if a.startswith("--web.listen-address=")][0].rsplit(":", 1)[1]
    assert f"{listen}:{listen}" in prom_svc["ports"]
    # Grafana: provisioned datasource points at the Prometheus service, dashboards folder is mounted
    g = svc["grafana"]
    gmounts = dict(v.split(":")[:2] for v in g["volumes"])
    assert gmounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    ds = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())["datasources"][0]
    assert urlparse(ds["url"]).hostname == "prometheus" and str(urlparse(ds["url"]).port) == listen
    prov = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/evoharness.yml").read_text())["providers"][0]
    assert gmounts["./grafana/dashboards"] == prov["options"]["path"]
    assert g["environment"]["GF_SERVER_HTTP_PORT"] + ":3000" in g["ports"]
    dash = json.loads((DEPLOY / "grafana/dashboards/evoharness.json").read_text())
    uids = {t["datasource"]["uid"] for p in dash["panels"] for t in p["targets"]}
    assert uids == {ds["uid"]}


def test_dashboard_covers_the_harness_cost_questions():
    dash = json.loads((DEPLOY / "grafana/dashboards/evoharness.json").read_text())
    titles = " | ".join(p["title"].lower() for p in dash["panels"])
    for needle in ("per step, by verb", "tokens per call", "seconds per call", "share of steps", "state bytes",
                   "bank size", "consolidation ops", "step position", "p50 / p99", "errors", "vllm throughput",
                   "kv cache"):
        assert needle in titles, needle
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


def test_k8s_manifests_cross_reference():
    docs = k8s()
    assert all({"apiVersion", "kind", "metadata"} <= set(d) for d in docs)
    deps, svcs = by_kind("Deployment") | by_kind("StatefulSet"), by_kind("Service")
    cms, secrets, pvcs = by_kind("ConfigMap"), by_kind("Secret"), by_kind("PersistentVolumeClaim")

    def pod(name):
        return deps[name]["spec"]["template"]

    for name, d in deps.items():                       # selectors match their pod templates
        assert d["spec"]["selector"]["matchLabels"].items() <= pod(name)["metadata"]["labels"].items()
        for v in pod(name)["spec"].get("volumes", []):
            if "persistentVolumeClaim" in v:
                assert v["persistentVolumeClaim"]["claimName"] in pvcs
    for s in svcs.values():                       # every Service selects a workload and names its port
        (target,) = [d for d in deps.values()
                     if s["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        ports = {p["name"]: p["containerPort"] for c in target["spec"]["template"]["spec"]["containers"]
                 for p in c["ports"]}
        for p in s["spec"]["ports"]:
            assert p["targetPort"] in ports and ports[p["targetPort"]] == p["port"]
    # the service: probes, port, config and secret
    (c,) = pod("evoharness")["spec"]["containers"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz" and c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert flag(c["command"], "--port") == str(c["ports"][0]["containerPort"]) == str(PORT)
    refs = [e.get("configMapRef", e.get("secretRef"))["name"] for e in c["envFrom"]]
    assert set(refs) <= set(cms) | set(secrets)
    env = {k: v for e in c["envFrom"] for src in (cms, secrets)
           for k, v in ((src.get((e.get("configMapRef") or e.get("secretRef"))["name"]) or {}).get("data")
                        or (src.get((e.get("configMapRef") or e.get("secretRef"))["name"]) or {}).get("stringData")
                        or {}).items()}
    redis = urlparse(env["REDIS_URL"])
    assert redis.hostname in svcs and any(p["port"] == redis.port for p in svcs[redis.hostname]["spec"]["ports"])
    assert env["EVOHARNESS_ENGINE"] == "remote"
    for u in json.loads(env["EVOHARNESS_REMOTE_URLS"]):
        u = urlparse(u)
        assert u.hostname in svcs and any(p["port"] == u.port for p in svcs[u.hostname]["spec"]["ports"])
    (vc,) = pod("vllm")["spec"]["containers"]
    assert flag(vc["args"], "--model") == env["EVOHARNESS_MODEL"]
    assert any(m["mountPath"] == env["EVOHARNESS_MODEL"] for m in vc["volumeMounts"])
    # HPA and ServiceMonitors point at things that exist
    for h in by_kind("HorizontalPodAutoscaler").values():
        ref = h["spec"]["scaleTargetRef"]
        assert ref["kind"] == "Deployment" and ref["name"] in deps and h["spec"]["minReplicas"] >= 1
    for sm in by_kind("ServiceMonitor").values():
        sel = sm["spec"]["selector"]["matchLabels"]
        matched = [s for s in svcs.values() if sel.items() <= s["metadata"]["labels"].items()]
        assert matched
        for ep in sm["spec"]["endpoints"]:
            assert all(ep["port"] in {p["name"] for p in s["spec"]["ports"]} for s in matched)
