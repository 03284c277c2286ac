"""OMP_NUM_THREADS=1 .venv/bin/python bench/service_vs_vllm.py --games data/alfworld-fresh/valid_unseen --n 64 \\
    --levels 1 16 32 64 --episodes runs/service_vs_vllm-episodes.json --json runs/service_vs_vllm.json

What the service adds on top of vLLM, and what vLLM adds over transformers: the whole service (HTTP -> Redis ->
engine) against vLLM's own OpenAI server hit directly with the same prompts, and against the same service in front
of transformers ``generate`` behind the same grammar, on the same recorded steps, in one run (issue 15's
side-by-side).

1. One `vllm.entrypoints.openai.api_server` serves the policy's merged checkpoint (the folder the service itself
   loads; bf16 where the CPU has bf16 instructions, compiled, no chunked prefill, the service's grammar backend),
   with ``--engine-threads`` OpenMP threads bound to the first that many allowed CPUs (default: all of them, the
   layout `evoharness serve` picks on a box of at most 4 CPUs).
2. Record: a real `evoharness serve` with `engine=remote` plays the games through the public HTTP API (ALFWorld
   environments in this process, ``--record-sessions`` at once). Its engine calls pass through a recording proxy, so
   every `/v1/completions` body the service sent (prompt, grammar regex, sampling) is kept, and so is every step's
   input (observation, admissible list, won / done). A session's requests are told apart by their first user message
   (task and first observation), which every prompt of the session starts with. ``--episodes FILE`` keeps the
   recording: a rerun with the same file replays it instead of recording again.
3. Replay, per level L (sessions at once), with vLLM's prefix cache reset before each side:
   * service: a second `evoharness serve` (`engine=remote`, straight to the vLLM server) gets the recorded step
     inputs of L games, one client thread per session; a step's latency is its `POST /step` wall time;
   * raw vLLM: L client threads send the same games' recorded request bodies to `/v1/completions`, one after
     another within a session, each step's generations in order; a step's latency is from its first request to
     its last response;
   * transformers (unless ``--no-transformers``): a third `evoharness serve` (`engine=remote`) in front of
     bench/hf_completions_server.py (``generate`` + xgrammar, one request at a time, the same threads) gets the same
     step inputs; no step starts after ``--transformers-budget-s`` seconds, since its rate does not grow with
     sessions (its steps are the games' first ones, the shortest prompts, which flatters it).
   Service and raw count the same steps (those with at least one generation), so steps/s compares like with like.
4. Unless ``--no-in-process``: the same replays against the service as `make serve` runs it, with its in-process
   vLLM engine (a fresh server per level, same model, dtype, context, KV cache size and threads), the deployment
   most users start with.

The ratio columns are service over raw (p50 latency), raw over service (steps/s), and service over transformers
(steps/s); issue 15's targets are within 1.2x of raw at 16 sessions and at least 5x transformers at 32. Replayed
steps are sent whatever the service answers; the table reports how many of its actions match the recording (greedy
decoding, so they should nearly all match).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ALFWORLD_DATA", str(ROOT / "data" / "alfworld-home"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from service.client import EvoHarnessClient  # noqa: E402
from service.embedded_redis import free_port  # noqa: E402
from service.hardware import serving_dtype  # noqa: E402
from service.policy.pretrained import resolve_policy_dir  # noqa: E402
from service.policy.wire import IM_END  # noqa: E402
from tests.deploy.live_server import live_server  # noqa: E402
from training.envs.alfworld.env import AlfWorldEnv  # noqa: E402
from training.envs.alfworld.paths import list_games  # noqa: E402

ENV_LOCK = threading.Lock()   # TextWorld's PDDL parsers are not thread-safe (see training.evaluate.LockedEnv)
CPUS = sorted(os.sched_getaffinity(0))


def thread_env(threads: int) -> dict:
    """An engine's OpenMP threads, bound one per CPU to the first ``threads`` allowed CPUs."""
    return {"OMP_NUM_THREADS": str(threads), "VLLM_CPU_OMP_THREADS_BIND": ",".join(str(c) for c in CPUS[:threads])}


# -- the vLLM server and the recording proxy ------------------------------------------------------------------------

def start_vllm(model_dir: Path, served_name: str, kv_gib: float, max_model_len: int, max_num_seqs: int,
               log: Path, extra_args: tuple[str, ...] = (), extra_env: dict | None = None) -> tuple:
    """One vLLM OpenAI server with the in-process engine's settings; ``extra_args`` come last, so they override
    (e.g. ``--enable-chunked-prefill --max-num-batched-tokens 512``), ``extra_env`` adds to its environment
    (e.g. ``OMP_NUM_THREADS``, ``VLLM_CPU_OMP_THREADS_BIND``)."""
    port = free_port()
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1",            # exposes POST /reset_prefix_cache
           "VLLM_USE_AOT_COMPILE": "0", "HF_HUB_OFFLINE": "1", **(extra_env or {})}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", served_name,   # the name the service asks for (its EVOHARNESS_MODEL)
           "--host", "127.0.0.1", "--port", str(port), "--dtype", serving_dtype("auto-cpu"),
           "--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs),
           "--kv-cache-memory-bytes", str(int(kv_gib * (1 << 30))),
           # the in-process engine's CPU settings (service/policy/engines/vllm_local.py)
           "--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(max_model_len, 2048)),
           "--structured-outputs-config", json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
           "--uvicorn-log-level", "warning", *extra_args]
    proc = subprocess.Popen(cmd, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    return proc, wait_ready(proc, f"http://127.0.0.1:{port}", log, "vLLM server")


def wait_ready(proc: subprocess.Popen, url: str, log: Path, what: str, timeout_s: float = 600) -> str:
    """``url`` once its ``/health`` answers 200; the log's tail if ``proc`` exits first."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready in {timeout_s:.0f} s")
        time.sleep(1)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def start_hf(model_dir: Path, served_name: str, threads: int, log: Path) -> tuple:
    """bench/hf_completions_server.py on ``model_dir``: transformers ``generate`` behind the request's grammar."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "hf_completions_server.py"), "--model",
                             str(model_dir), "--served-model-name", served_name, "--port", str(port), "--threads",
                             str(threads)], env={**os.environ, "OMP_NUM_THREADS": str(threads)},
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    return proc, wait_ready(proc, f"http://127.0.0.1:{port}", log, "transformers server", 300)


def session_key(prompt: str) -> str:
    """The first user message: every prompt of a session starts with the system message and then this one."""
    return prompt.split(IM_END)[1]


class RecordingProxy:
    """A pass-through for the vLLM server that keeps every `/v1/completions` body, grouped by session_key."""

    def __init__(self, upstream: str):
        import uvicorn
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        self.upstream = upstream
        self.bodies: dict[str, list[dict]] = {}
        client = httpx.AsyncClient(timeout=None)

        async def forward(request: Request) -> Response:
            raw = await request.body()
            if request.url.path == "/v1/completions":
                body = json.loads(raw)
                self.bodies.setdefault(session_key(body["prompt"]), []).append(body)
            r = await client.request(request.method, upstream + request.url.path, content=raw,
                                     headers={"content-type": request.headers.get("content-type", "")})
            return Response(r.content, status_code=r.status_code, media_type=r.headers.get("content-type"))

        app = Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST"])])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


def reset_prefix_cache(vllm_url: str) -> None:
    httpx.post(f"{vllm_url}/reset_prefix_cache", timeout=30).raise_for_status()


COUNTERS = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total")


def prefix_counters(vllm_url: str) -> dict:
    """vLLM's prefix-cache and token counters (cumulative) from its /metrics, without the ``vllm:`` prefix."""
    out = {}
    for line in httpx.get(f"{vllm_url}/metrics", timeout=10).text.splitlines():
        for name in COUNTERS:
            if line.startswith(name):
                out[name.split(":")[1]] = out.get(name.split(":")[1], 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def serve_remote(policy: Path, vllm_url: str | list[str], log: Path, max_model_len: int,
                 remote_policy: str = "affinity"):
    urls = [vllm_url] if isinstance(vllm_url, str) else vllm_url
    return live_server(policy, log, EVOHARNESS_ENGINE="remote", EVOHARNESS_REMOTE_URLS=json.dumps(urls),
                       EVOHARNESS_REMOTE_POLICY=remote_policy,
                       EVOHARNESS_MAX_MODEL_LEN=str(max_model_len), EVOHARNESS_RATE_LIMIT="0",
                       EVOHARNESS_ENGINE_TIMEOUT_S="600", EVOHARNESS_STEP_TIMEOUT_S="900",
                       # a bench measures throughput, not load shedding: a step waits for its slot (behind a slow
                       # engine such as transformers at 32 sessions) rather than getting 503 after the default 30 s
                       EVOHARNESS_ADMISSION_TIMEOUT_S="900")


# -- record -----------------------------------------------------------------------------------------------------

def record_game(url: str, game: Path, max_steps: int) -> dict:
    with ENV_LOCK:
        env = AlfWorldEnv(max_steps=max_steps)
        st = env.reset(game)
    task, first_obs, steps = st["task"], st["observation"], []
    try:
        with EvoHarnessClient(url, timeout=900) as evo:
            sid = evo.create_session(task, domain="alfworld", mode="inline", max_steps=max_steps + 30).session_id
            while True:
                inp = {"observation": st["observation"], "admissible": st["admissible_actions"], "won": st["won"],
                       "done": st["done"]}
                step = evo.step(sid, st["observation"], st["admissible_actions"], won=st["won"],
                                done=True if st["done"] else None)
                steps.append({**inp, "generations": len(step.turns), "action": step.action})
                if st["done"]:
                    break
                with ENV_LOCK:
                    st = env.step(step.action)
            evo.end(sid, won=st["won"])
    finally:
        with ENV_LOCK:
            env.close()
    return {"game": game.name, "task": task, "first_observation": first_obs, "won": bool(st["won"]),
            "steps": steps}


def attach_bodies(episodes: list[dict], bodies: dict[str, list[dict]]) -> None:
    """Give each recorded episode its engine requests: the session whose first user message holds its task and
    first observation, with one request per generation."""
    for e in episodes:
        keys = [k for k in bodies if e["task"] in k and e["first_observation"].strip()[:300] in k]
        if len(keys) != 1:
            raise RuntimeError(f"{e['game']}: {len(keys)} recorded sessions match its first observation")
        reqs = bodies[keys[0]]
        want = sum(s["generations"] for s in e["steps"])
        if len(reqs) != want:
            raise RuntimeError(f"{e['game']}: {len(reqs)} engine requests recorded, {want} generations stepped")
        e["requests"], i = [], 0
        for s in e["steps"]:
            e["requests"].append(reqs[i: i + s["generations"]])
            i += s["generations"]


# -- replay -----------------------------------------------------------------------------------------------------

def replay_service(url: str, e: dict, deadline: float | None = None) -> dict:
    """One recorded game's steps through the service; no step starts after ``deadline`` (time.perf_counter)."""
    lat, same = [], 0
    with EvoHarnessClient(url, timeout=900) as evo:
        sid = evo.create_session(e["task"], domain="alfworld", mode="inline",
                                 max_steps=len(e["steps"]) + 30).session_id
        for s in e["steps"]:
            if deadline is not None and time.perf_counter() > deadline:
                break
            t0 = time.perf_counter()
            step = evo.step(sid, s["observation"], s["admissible"], won=s["won"], done=True if s["done"] else None)
            if s["generations"]:
                lat.append(time.perf_counter() - t0)
                same += step.action == s["action"]
        evo.end(sid, won=e["won"])
    return {"latency": lat, "same_action": same}


def replay_raw(vllm_url: str, e: dict, deadline: float | None = None) -> dict:
    lat = []
    with httpx.Client(timeout=None) as http:
        for reqs in e["requests"]:
            if not reqs:
                continue
            if deadline is not None and time.perf_counter() > deadline:
                break
            t0 = time.perf_counter()
            for body in reqs:
                http.post(f"{vllm_url}/v1/completions", json=body).raise_for_status()
            lat.append(time.perf_counter() - t0)
    return {"latency": lat, "same_action": None}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else float("nan")


def run_level(side: str, fn, target: str, episodes: list[dict], sessions: int, vllm_url: str | None,
              budget_s: float | None = None) -> dict:
    """Replay `episodes` with `sessions` client threads, no step starting after `budget_s` seconds (if given);
    vllm_url (the shared server) has its prefix cache reset first and its counters read around the run."""
    if vllm_url:
        reset_prefix_cache(vllm_url)
    before = prefix_counters(vllm_url) if vllm_url else {}
    t0 = time.perf_counter()
    deadline = None if budget_s is None else t0 + budget_s
    with ThreadPoolExecutor(sessions) as pool:
        results = list(pool.map(lambda e: fn(target, e, deadline), episodes))
    wall = time.perf_counter() - t0
    after = prefix_counters(vllm_url) if vllm_url else {}
    lat = [x for r in results for x in r["latency"]]
    q = after.get("prefix_cache_queries_total", 0) - before.get("prefix_cache_queries_total", 0)
    h = after.get("prefix_cache_hits_total", 0) - before.get("prefix_cache_hits_total", 0)
    row = {"side": side, "sessions": sessions, "games": len(episodes), "steps": len(lat), "seconds": round(wall, 2),
           "steps_per_s": round(len(lat) / wall, 2), "p50": pct(lat, 0.5), "p99": pct(lat, 0.99),
           "prefix_cache_hit": round(h / q, 3) if q else None}
    if side != "raw":
        row["same_action"] = sum(r["same_action"] for r in results)
    print(f"{side:>12} at {sessions:>2} sessions: {row['steps']} steps in {row['seconds']} s, p50 {row['p50']} s, "
          f"p99 {row['p99']} s", flush=True)
    return row


def record(args, games: list[Path], vllm_url: str, tmp: Path) -> tuple[list[dict], dict]:
    """Play ``games`` through a service in front of a recording proxy; the episodes with their engine requests."""
    t0 = time.perf_counter()
    with RecordingProxy(vllm_url) as proxy, \
            serve_remote(Path(args.policy), proxy.url, tmp / "record.log", args.max_model_len) as url, \
            ThreadPoolExecutor(args.record_sessions) as pool:
        episodes = list(pool.map(lambda g: record_game(url, g, args.max_steps), games))
    attach_bodies(episodes, proxy.bodies)
    return episodes, {"seconds": round(time.perf_counter() - t0, 1), "games": len(episodes),
                      "won": sum(e["won"] for e in episodes), "steps": sum(len(e["steps"]) for e in episodes),
                      "generations": sum(s["generations"] for e in episodes for s in e["steps"])}


def print_table(out: dict) -> None:
    print("\n| sessions | side | steps | wall s | steps/s | step p50 s | step p99 s | prefix cache | "
          "service/raw p50 | raw/service steps/s | service/transformers steps/s |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    by = {(r["sessions"], r["side"]): r for r in out["levels"] + out["in_process"]}
    for n in sorted({r["sessions"] for r in out["levels"] + out["in_process"]}):
        svc, raw, hf = by.get((n, "service")), by.get((n, "raw")), by.get((n, "transformers"))
        for r in (svc, raw, hf, by.get((n, "in-proc"))):
            if r is None:
                continue
            ratios = ["", "", ""]
            if r is svc and raw:
                ratios[:2] = [f"{svc['p50'] / raw['p50']:.2f}x", f"{raw['steps_per_s'] / svc['steps_per_s']:.2f}x"]
            if r is svc and hf and hf["steps_per_s"]:
                ratios[2] = f"{svc['steps_per_s'] / hf['steps_per_s']:.1f}x"
            hit = f"{100 * r['prefix_cache_hit']:.1f} %" if r["prefix_cache_hit"] is not None else "-"
            side = {"in-proc": "service, in-process engine", "transformers": "service over transformers"}.get(
                r["side"], r["side"])
            print(f"| {r['sessions']} | {side} | {r['steps']} | {r['seconds']} | {r['steps_per_s']} | {r['p50']} | "
                  f"{r['p99']} | {hit} | {' | '.join(ratios)} |")
    sames = [(r["side"], r["sessions"], r["same_action"], r["steps"]) for r in out["levels"] + out["in_process"]
             if r["side"] != "raw"]
    print("service actions equal to the recording: " + ", ".join(f"{s}@{n} {a}/{b}" for s, n, a, b in sames))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--policy", default=str(ROOT / "models" / "default-policy"))
    ap.add_argument("--games", required=True, help="folder of generated games (a split folder)")
    ap.add_argument("--n", type=int, default=64, help="games recorded (at least the largest level)")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 16, 32, 64], help="sessions at once, per level")
    ap.add_argument("--one-session-games", type=int, default=3, help="games replayed at the 1-session level")
    ap.add_argument("--record-sessions", type=int, default=16, help="sessions at once while recording")
    ap.add_argument("--max-steps", type=int, default=50)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--kv-cache-gib", type=float, default=1.0)
    ap.add_argument("--engine-threads", type=int, default=len(CPUS),
                    help="threads of every engine (vLLM server, in-process engine, transformers), bound to the first "
                         "that many allowed CPUs")
    ap.add_argument("--no-in-process", dest="in_process", action="store_false",
                    help="skip the service with its default in-process engine on the same replays")
    ap.add_argument("--no-transformers", dest="transformers", action="store_false",
                    help="skip the service in front of transformers generate on the same replays")
    ap.add_argument("--transformers-budget-s", type=float, default=240.0,
                    help="per level: the transformers side starts no step after this many seconds")
    ap.add_argument("--transformers-levels", type=int, nargs="+", default=None,
                    help="the levels the transformers side replays (default: every level; its rate does not grow "
                         "with sessions, so a few suffice)")
    ap.add_argument("--episodes", default=None, help="recording cache: replayed if it exists, else written")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if not 1 <= args.engine_threads <= len(CPUS):
        ap.error(f"--engine-threads must be 1..{len(CPUS)} (the allowed CPUs)")
    games = list_games(Path(args.games))[: args.n]
    cached = bool(args.episodes) and Path(args.episodes).exists()
    if not cached and len(games) < max(args.levels):
        ap.error(f"{len(games)} games, fewer than the largest level {max(args.levels)}")
    model_dir = resolve_policy_dir(args.policy)
    threads = thread_env(args.engine_threads)
    out: dict = {"policy": args.policy, "model_dir": str(model_dir), "games": args.games, "cpus": CPUS,
                 "engine_threads": args.engine_threads, "levels": [], "in_process": []}

    def save() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))

    def games_at(n: int, episodes: list[dict]) -> list[dict]:
        return episodes[: args.one_session_games] if n == 1 else episodes[:n]

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        proc, vllm_url = start_vllm(model_dir, args.policy, args.kv_cache_gib, args.max_model_len,
                                    max(max(args.levels), 16), tmp / "vllm.log", extra_env=threads)
        try:
            if cached:
                episodes = json.loads(Path(args.episodes).read_text())
                out["record"] = {"cached": args.episodes, "games": len(episodes)}
            else:
                episodes, out["record"] = record(args, games, vllm_url, tmp)
                if args.episodes:
                    Path(args.episodes).write_text(json.dumps(episodes))
            if len(episodes) < max(args.levels):
                ap.error(f"{len(episodes)} recorded games, fewer than the largest level {max(args.levels)}")
            print(f"recorded: {out['record']}", flush=True)
            save()
            with serve_remote(Path(args.policy), vllm_url, tmp / "serve.log", args.max_model_len) as url:
                for n in args.levels:
                    out["levels"].append(run_level("service", replay_service, url, games_at(n, episodes), n, vllm_url))
                    out["levels"].append(run_level("raw", replay_raw, vllm_url, games_at(n, episodes), n, vllm_url))
                    save()
        finally:
            stop(proc)
        if args.transformers:     # the vLLM server is stopped first: the engines never share the cores
            hf_proc, hf_url = start_hf(model_dir, args.policy, args.engine_threads, tmp / "hf.log")
            try:
                with serve_remote(Path(args.policy), hf_url, tmp / "serve-hf.log", args.max_model_len) as url:
                    for n in args.transformers_levels or args.levels:
                        out["levels"].append(run_level("transformers", replay_service, url, games_at(n, episodes), n,
                                                       None, args.transformers_budget_s))
                        save()
            finally:
                stop(hf_proc)
        if args.in_process:
            for n in args.levels:
                # a fresh server per level: its engine's prefix cache cannot be reset from outside
                with live_server(Path(args.policy), tmp / "inproc.log", EVOHARNESS_ENFORCE_EAGER="0",
                                 EVOHARNESS_MAX_MODEL_LEN=str(args.max_model_len), EVOHARNESS_RATE_LIMIT="0",
                                 EVOHARNESS_KV_CACHE_GIB=str(args.kv_cache_gib), EVOHARNESS_ENGINE_TIMEOUT_S="600",
                                 EVOHARNESS_STEP_TIMEOUT_S="900", **threads) as url:
                    out["in_process"].append(run_level("in-proc", replay_service, url, games_at(n, episodes), n,
                                                       None))
                    save()
    print_table(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
