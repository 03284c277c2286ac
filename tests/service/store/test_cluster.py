"""The service on a real local Redis Cluster (3 masters, no replicas) that this test starts:
`redis-server --cluster-enabled yes` on three ports + `redis-cli --cluster create`. A whole session and a bank
consolidation through the API with EVOHARNESS_REDIS_CLUSTER=true, and every key of a document in one slot."""

from __future__ import annotations

import shutil
import subprocess
import time

import jsonpatch
import pytest


def cluster_port() -> int:
    """A free port whose cluster-bus port (port + 10000) is free too (and below 65536)."""
    import random
    import socket

    while True:
        port = random.randint(10000, 22000)  # port and bus port stay below the ephemeral range
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue

pytestmark = pytest.mark.skipif(not (shutil.which("redis-server") and shutil.which("redis-cli")),
                                reason="needs redis-server and redis-cli")

ROOM = ["go to desk 1", "go to drawer 1", "open drawer 1", "look"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    ports = [cluster_port() for _ in range(3)]
    procs = []
    for port in ports:
        d = tmp_path_factory.mktemp(f"node{port}")
        procs.append(subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", str(d / "nodes.conf"), "--cluster-node-timeout", "5000", "--dir", str(d),
             "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        for port in ports:
            for _ in range(100):
                if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True
                                  ).stdout.strip() == "PONG":
                    break
                time.sleep(0.05)
        out = subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                              "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        for _ in range(200):
            info = subprocess.run(["redis-cli", "-p", str(ports[0]), "cluster", "info"], capture_output=True,
                                  text=True).stdout
            if "cluster_state:ok" in info:
                break
            time.sleep(0.1)
        assert "cluster_known_nodes:3" in info and "cluster_size:3" in info
        yield f"redis://127.0.0.1:{ports[0]}/0", ports
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)


async def test_session_on_redis_cluster(cluster, vllm_engine):
    from service.api.app import create_app
    from tests.support import Client, make_settings

    url, ports = cluster
    app = create_app(make_settings(url, redis_cluster=True, harness_cap=1), engine=vllm_engine)
    async with Client(app) as c:
        assert (await c.get("/readyz")).status_code == 200
        sids = []
        for _ in range(12):   # several sessions: their hash tags land on different masters
            r = await c.post("/v1/sessions", json={"task": "put a pen in drawer", "domain": "alfworld"})
            assert r.status_code == 201, r.text
            sids.append(r.json()["session_id"])
        sid = sids[0]
        for i in range(3):
            r = await c.post(f"/v1/sessions/{sid}/step", headers={"Idempotency-Key": f"k{i}"},
                             json={"observation": f"You arrive at desk {i + 1}. You see a pen 1.",
                                   "admissible_actions": ROOM})
            assert r.status_code == 200, r.text
            again = await c.post(f"/v1/sessions/{sid}/step", headers={"Idempotency-Key": f"k{i}"},
                                 json={"observation": f"You arrive at desk {i + 1}. You see a pen 1.",
                                       "admissible_actions": ROOM})
            assert again.json() == r.json()
        version = r.json()["version"]
        r = await c.post(f"/v1/sessions/{sid}/step", headers={"If-Match": "0"},
                         json={"observation": "x", "admissible_actions": ROOM})
        assert r.status_code == 409 and r.json()["version"] == version
        events = (await c.get(f"/v1/sessions/{sid}/audit", params={"limit": 1000})).json()["events"]
        doc = (await c.get(f"/v1/sessions/{sid}/state", params={"version": 0})).json()["state"]
        for e in events:
            doc = jsonpatch.apply_patch(doc, e["patch"])
        assert doc == (await c.get(f"/v1/sessions/{sid}/state")).json()["state"]
        assert (await c.get(f"/v1/sessions/{sid}/diff", params={"from": 0, "to": version})).status_code == 200
        assert (await c.post(f"/v1/sessions/{sid}/end", json={"won": True})).status_code == 200
        r = await c.post("/v1/banks/default/consolidate")
        assert r.status_code == 200 and r.json()["evidence"] == 1, r.text
        assert (await c.get("/v1/banks/default")).status_code == 200
        assert (await c.patch(f"/v1/sessions/{sids[1]}/controls", json={"harness_cap": 0})).status_code == 200
        assert (await c.delete(f"/v1/sessions/{sids[2]}")).status_code == 204
        assert (await c.get(f"/v1/sessions/{sids[2]}/state")).status_code == 404
        metrics = (await c.get("/metrics")).text
        assert "evoharness_active_sessions 10.0" in metrics
        assert (await c.delete(f"/v1/sessions/{sid}")).status_code == 204     # with its idempotency records

    # the documents really are spread over the masters, each document in one slot
    slots_of = {}
    for port in ports:
        keys = subprocess.run(["redis-cli", "-p", str(port), "--scan", "--pattern", "*{s:*"], capture_output=True,
                              text=True).stdout.split()
        for k in keys:
            slots_of.setdefault(k.split("}")[0], set()).add(port)
    assert len(slots_of) == 10 and all(len(v) == 1 for v in slots_of.values())
    assert not any(sid in k or sids[2] in k for k in slots_of)
    assert len({p for v in slots_of.values() for p in v}) >= 2      # P(all on one master) = 3^-11


async def test_step_rate_limit_on_redis_cluster(cluster):
    """On a cluster the counter and the session are in different slots: the step is counted in its own call
    before the lease; a refused step still takes no lease and writes nothing."""
    from service.api.app import create_app
    from service.policy.engines.scripted import ScriptedEngine
    from tests.support import Client, make_settings

    url, _ = cluster
    app = create_app(make_settings(url, redis_cluster=True, engine="scripted", rate_limit=3, rate_window_s=30),
                     engine=ScriptedEngine(["<think>t</think><action>look</action>"]))
    async with Client(app) as c:
        docs = app.state.sessions.docs
        assert not docs.can_peek
        sid = (await c.post("/v1/sessions", json={"task": "t"})).json()["session_id"]                  # 1
        step = {"observation": "o", "admissible_actions": ROOM}
        assert (await c.post(f"/v1/sessions/{sid}/step", json=step)).status_code == 200                # 2
        assert (await c.post(f"/v1/sessions/{sid}/step", json=step)).status_code == 200                # 3
        version = (await docs.load(sid)).version
        r = await c.post(f"/v1/sessions/{sid}/step", json=step, headers={"Idempotency-Key": "k"})
        assert r.status_code == 429 and r.json()["retry_after"] == int(r.headers["retry-after"])
        assert (await docs.load(sid)).version == version
        assert await docs.r.get(docs.key(sid, "lock")) is None
        assert await docs.r.get(docs.key(sid, "idem:k")) is None
