"""python -m training.evaluate --model models/default-policy --split valid_unseen --mode inline

Evaluate a policy folder through the service's vLLM engine, the harness runtime and the ALFWorld driver. Settings:
``EvalConfig`` (``--help`` lists them; ``--config FILE.json`` reads them from a file, see ``training.cli``).

    CPU:  python -m training.evaluate --model models/default-policy --split valid_unseen --mode inline --n 20
          python -m training.evaluate --model DIR --split valid_seen valid_unseen --mode inline always_on env_only
    GPU:  same command; add --kv-cache-gib 8 and drop --n for the full splits (140 / 134 games)

Each (split, mode) plays its games with ``training.agent.EnginePolicy`` over one in-process
``service.policy.engines.vllm_local.VLLMEngine`` (grammar-constrained, greedy). The Experience bank starts from
``--bank`` (default: the model folder's ``bank.json`` if present, else empty) and is consolidated by
``service.bank.evolver.consolidate`` after every window of ``--window`` episodes, as the service does.

Reports per (split, mode): success % per task type, mean steps, harness calls per episode by verb, harness tokens
per episode (what harness content writes into the context, see ``RecordingPolicy``), tokens per episode, bank size —
``<out>/eval.json``, ``<out>/eval.md`` (markdown table), ``<out>/eval.png`` and
``<out>/transcripts/<split>-<mode>/<game>.txt`` (each episode's chat as the policy last saw it, with its last
completion).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from service.policy.render import harness_result_message
from service.policy.wire import IM_END, IM_START
from training import cli
from training.agent import EnginePolicy

PANEL_PREFIXES = ("Plan: ", "Belief: ", "Experience: ")


@dataclass
class EvalConfig:
    """Evaluation settings."""

    model: str = field(metadata={"help": "policy folder (as served; a policy.json folder works)"})
    split: list[str] = field(default_factory=lambda: ["valid_unseen"], metadata={"help": "splits to play"})
    mode: list[str] = field(default_factory=lambda: ["inline"], metadata={"help": "harness modes to play"})
    n: int | None = field(default=None, metadata={"help": "games per split (all when not given)"})
    skip: int = field(default=0, metadata={
        "help": "skip the first N games of each split (another process plays them: see --merge)"})
    merge: list[str] = field(default_factory=list, metadata={
        "help": "report folders to merge into --out instead of playing (their episodes, in the order given)"})
    max_steps: int = field(default=50, metadata={"help": "environment steps per episode"})
    window: int = field(default=8, metadata={"help": "episodes per bank consolidation"})
    bank_lag: int = field(default=0, metadata={
        "help": "windows the bank a window starts with lags behind: 0 = each window waits for the one before it "
                "to be played and consolidated; 1 = it starts with the bank of the windows before that one and "
                "fills the slots as they free, as a service's evolver runs behind its live sessions"})
    concurrency: int = field(default=8, metadata={
        "help": "episodes in flight at once (threads, one env each; the engine batches their requests); at most "
                "--window. 1 = one episode after another"})
    bank: str | None = field(default=None, metadata={
        "help": "bank JSON to start from (default: <model>/bank.json if present)"})
    out: str | None = field(default=None, metadata={"help": "report folder (default: runs/eval/<model name>)"})
    kv_cache_gib: float = field(default=0.25, metadata={"help": "vLLM KV cache size"})
    temperature: float = field(default=0.0, metadata={
        "help": "sampling temperature (0 = greedy); serve with the same EVOHARNESS_TEMPERATURE"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling share"})
    seed: int | None = field(default=None, metadata={
        "help": "per-request seed (default none: the engine's generator runs on, so a repeated prompt can be "
                "answered differently, as in serving)"})
    dtype: str = field(default="auto-cpu", metadata={
        "help": "vLLM dtype: auto-cpu (the service's default) is bfloat16 on CPUs with AVX512-BF16 or AMX and "
                "float32 elsewhere (emulated bf16 ran a 135M model ~2x slower); or float32, bfloat16, auto"})
    max_model_len: int = field(default=4096, metadata={"help": "context: a 50-step episode is one chat"})
    eager: bool = field(default=False, metadata={"help": "skip torch.compile (fast start, ~2x slower decode)"})
    engine_kwargs: dict = field(default_factory=dict, metadata={
        "help": "more vLLM engine arguments as JSON, for serving experiments, e.g. '{\"block_size\": 32}' or "
                "'{\"kv_cache_dtype\": \"fp8\"}' (docs/benchmarks.md, section h, session 23: none paid here)"})
    call_budget: int | None = field(default=None, metadata={
        "help": "ablation: at most this many harness calls per episode (the grammar then offers environment "
                "actions only; the prompt is unchanged). Default: no bound, as served"})
    disabled_verbs: list[str] = field(default_factory=list, metadata={
        "help": "ablation: harness verbs switched off, as an operator's disabled_verbs control does"})


def panel_text(message: str) -> str:
    """The harness panels of a rendered observation message (the renderer's Plan/Belief/Experience lines)."""
    return "\n".join(line for line in message.splitlines() if line.startswith(PANEL_PREFIXES))


def newest_user_message(prompt: str) -> str:
    """The last user turn of a rendered prompt (a step's first prompt ends with its new observation)."""
    head = f"{IM_START}user\n"
    return prompt[prompt.rfind(head) + len(head):].split(IM_END, 1)[0] if head in prompt else ""


class RecordingPolicy(EnginePolicy):
    """EnginePolicy that also keeps per-episode harness calls by verb and harness tokens.

    The prompt is the episode as one chat, so every token is written into the context once and re-read from the
    prefix cache afterwards. Harness tokens of an episode = the tokens harness content writes into the context:
    each harness call's completion and its result message (``inline``), plus the Plan / Belief / Experience panel
    lines of each observation message (``always_on``); ``env_only`` has neither. The constant verb help in the
    system prompt is left out.
    """

    def __init__(self, *args, count_tokens=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.episodes: list[dict] = []
        self.count_tokens = count_tokens or (lambda text: len(text.split()))

    def act(self, observation, admissible, won, done):
        if done and self.agent is not None:
            turns = [t for o in self.agent.outcomes for t in o.turns]
            harness = [t for t in turns if t.kind == "harness"]
            by_verb: dict[str, int] = {}
            for t in harness:
                by_verb[t.verb] = by_verb.get(t.verb, 0) + 1
            call_tokens = sum(t.completion_tokens + self.count_tokens(harness_result_message(t.verb, t.arg, t.result))
                              for t in harness)
            panels = 0
            for o in self.agent.outcomes:
                text = panel_text(newest_user_message(o.prompts[0])) if o.prompts else ""
                panels += self.count_tokens(text) if text else 0
            last = self.agent.outcomes[-1] if self.agent.outcomes else None
            transcript = (last.prompts[-1] + last.turns[-1].raw) if last and last.prompts and last.turns else ""
            self.episodes.append({"transcript": transcript, "by_verb": by_verb, "harness_call_tokens": call_tokens,
                                  "panel_tokens": panels,
                                  "harness_tokens": call_tokens + panels,
                                  "steps_used": self.agent.state["budget"]["used"]})
        return super().act(observation, admissible, won, done)


def games_for(split: str, n: int | None) -> list[Path]:
    from training.envs.alfworld.driver import split_games
    from training.envs.alfworld.paths import DATA_ROOT, list_games

    folder = DATA_ROOT / split
    if split != "fixtures" and folder.exists():
        games = [g for g in list_games(folder) if not g.name.startswith(".")]
        if games and (n is None or len(games) >= n or (folder / "manifest.json").exists()):
            return games[:n] if n else games
    return split_games(split, n)


class LockedEnv:
    """An ``AlfWorldEnv`` whose engine calls hold one process-wide lock: TextWorld parses PDDL with module-level
    tatsu parsers that are not thread-safe (concurrent resets corrupt their parse stacks). Engine calls are pure
    Python, so the lock costs no parallelism the GIL would allow; the policy's engine requests still overlap."""

    _lock = threading.Lock()

    def __init__(self, env):
        self.env = env

    def reset(self, game):
        with self._lock:
            return self.env.reset(game)

    def step(self, action: str):
        with self._lock:
            return self.env.step(action)

    def close(self) -> None:
        with self._lock:
            self.env.close()

    def __getattr__(self, name):
        return getattr(self.env, name)


class EpisodeSlots:
    """``concurrency`` (environment, policy twin) pairs, reused across windows; one episode per slot at a time.

    Each slot has its own ``AlfWorldEnv`` (TextWorld state is per instance) and its own ``RecordingPolicy.fork()``
    (per-episode harness state); all twins share one engine, which batches their requests.
    """

    def __init__(self, policy: RecordingPolicy, concurrency: int, max_steps: int):
        import queue

        from training.envs.alfworld.env import AlfWorldEnv

        self.free: queue.Queue = queue.Queue()
        self.all = [(policy.fork(), LockedEnv(AlfWorldEnv(max_steps=max_steps))) for _ in range(max(1, concurrency))]
        for slot in self.all:
            self.free.put(slot)

    def play(self, game, mode: str | None = None, bank: dict | None = None) -> tuple[dict, dict]:
        """One episode on a free slot: (driver record + harness extras, the episode's bank evidence). ``mode`` and
        ``bank``, where given, are this episode's (otherwise the slot keeps what ``set`` or the policy gave it)."""
        from training.envs.alfworld.episode import play_episode

        twin, env = self.free.get()
        try:
            if mode is not None:
                twin.mode = mode
            if bank is not None:
                twin.bank = bank
            twin.episodes, twin.evidence = [], []
            row = play_episode(env, twin, game)
            row.update(twin.episodes[-1])
            return row, twin.evidence[-1]
        finally:
            self.free.put((twin, env))

    def close(self) -> None:
        for _, env in self.all:
            env.close()


def evaluate_one(slots: EpisodeSlots, games, mode: str, bank: dict, window: int, lag: int = 0,
                 on_window=None) -> tuple[list[dict], dict]:
    """Play ``games`` in windows of ``window`` episodes (up to the slots' concurrency at once), consolidating the
    bank after each window from that window's evidence in game order, as the service's evolver would.

    ``lag`` is how many windows the bank a window starts with lags behind: with 0, window k starts once window k-1
    is played and consolidated, so the slots idle while the window's slowest episode (often a lost one, at the step
    limit) finishes; with 1, window k starts with the bank of windows 0..k-2 and fills the slots window k-1 frees.
    Either way each game's bank depends on the game order only, not on which episode finishes first."""
    from concurrent.futures import ThreadPoolExecutor

    from tqdm import tqdm

    from service.bank.evolver import consolidate

    chunks = [games[start:start + window] for start in range(0, len(games), window)]
    banks = [bank]            # banks[j]: the bank after consolidating windows 0..j-1
    pending: list[list] = []  # futures of each window, in window order
    results: list[dict] = []
    bar = tqdm(total=len(games), desc=f"{mode}", unit="game")

    def consolidate_next() -> None:
        j = len(banks) - 1
        played = [f.result() for f in pending[j]]   # window order, and game order inside it
        evidence = [dict(ev, session_id=f"{j * window + i:05d}") for i, (_, ev) in enumerate(played)]
        banks.append(consolidate(banks[j], evidence, j + 1)[0])
        results.extend(row for row, _ in played)
        bar.update(len(played))
        if on_window is not None:
            on_window(results, banks[-1])

    with ThreadPoolExecutor(len(slots.all)) as pool:
        for k, chunk in enumerate(chunks):
            ready = max(0, k - max(0, lag))          # window k starts with banks[ready]
            while len(banks) - 1 < ready:
                consolidate_next()
            pending.append([pool.submit(slots.play, game, mode, banks[ready]) for game in chunk])
        while len(banks) - 1 < len(chunks):
            consolidate_next()
    bar.close()
    return results, banks[-1]


def summarize_mode(results: list[dict], bank: dict) -> dict:
    from training.envs.alfworld.driver import summarize

    s = summarize(results)
    n = max(1, len(results))
    verbs: dict[str, float] = {}
    for r in results:
        for v, c in r.get("by_verb", {}).items():
            verbs[v] = verbs.get(v, 0) + c / n
    s["overall"]["harness_calls_by_verb"] = {v: round(c, 2) for v, c in sorted(verbs.items())}
    s["overall"]["mean_harness_tokens"] = round(sum(r.get("harness_tokens", 0) for r in results) / n, 1)
    s["overall"]["mean_harness_call_tokens"] = round(sum(r.get("harness_call_tokens", 0) for r in results) / n, 1)
    s["overall"]["mean_panel_tokens"] = round(sum(r.get("panel_tokens", 0) for r in results) / n, 1)
    s["overall"]["mean_tokens"] = round(sum(r["prompt_tokens"] + r["completion_tokens"] for r in results) / n, 1)
    s["bank_size"] = len(bank["entries"])
    return s


def prefix_cache_tokens() -> tuple[float, float]:
    """(prompt tokens queried, tokens found in the prefix cache) so far, from the in-process engine's ``vllm:*``
    counters (prometheus_client's default registry; 0, 0 when vLLM's stat logger is off)."""
    from prometheus_client import REGISTRY

    totals = {"vllm:prefix_cache_queries_total": 0.0, "vllm:prefix_cache_hits_total": 0.0}
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    return totals["vllm:prefix_cache_queries_total"], totals["vllm:prefix_cache_hits_total"]


def markdown(report: dict) -> str:
    from training.envs.alfworld.tasks import SHORT_NAMES

    types = list(SHORT_NAMES)
    head = ["split", "mode", "games", "success %"] + [SHORT_NAMES[t] for t in types] + \
        ["steps", "harness/ep", "by verb", "harness tok/ep", "tok/ep", "bank"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, s in report["results"].items():
        split, mode = key.split("/")
        o = s["overall"]
        per = [f"{s['per_task_type'][t]['success_pct']:.0f}" if t in s["per_task_type"] else "-" for t in types]
        verbs = ", ".join(f"{v} {c}" for v, c in o["harness_calls_by_verb"].items()) or "-"
        lines.append("| " + " | ".join([split, mode, str(o["games"]), f"{o['success_pct']:.1f}"] + per + [
            f"{o['mean_steps']:.1f}", f"{o['mean_harness_calls']:.2f}", verbs, f"{o['mean_harness_tokens']:.0f}",
            f"{o['mean_tokens']:.0f}", str(s["bank_size"])]) + " |")
    caches = [f"{k} {c['hit_pct']:.1f} % of {c['queried_tokens']:,.0f} prompt tokens"
              for k, c in report.get("prefix_cache", {}).items() if c["queried_tokens"]]
    if caches:
        lines += ["", f"Prefix cache (vLLM, {report.get('dtype', '?')}): " + "; ".join(caches) + "."]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> EvalConfig:
    return cli.parse(EvalConfig, argv, __doc__)


def merge_reports(folders: list[str], out: Path) -> dict:
    """One report from several processes' reports (e.g. ``--skip 0 --n 48`` and ``--skip 48``, or one process per
    split): their episodes per (split, mode) in the order given, summarized again; seconds are the slowest process's
    (they ran side by side), prefix-cache tokens the sum of theirs. Each process consolidated its own copy of the
    bank, so the merged bank size is the largest of theirs."""
    reports = [json.loads((Path(f) / "eval.json").read_text()) for f in folders]
    merged = {**reports[0], "results": {}, "seconds": {}, "episodes": {}, "partial": {}, "prefix_cache": {},
              "merged_from": folders}
    for key in dict.fromkeys(k for r in reports for k in r["results"]):
        having = [r for r in reports if key in r["results"]]
        episodes = [e for r in having for e in r["episodes"].get(key, [])]
        bank_size = max(r["results"][key]["bank_size"] for r in having)
        merged["results"][key] = summarize_mode(episodes, {"entries": range(bank_size)})
        merged["seconds"][key] = max(r["seconds"].get(key, 0.0) for r in having)
        merged["episodes"][key] = episodes
        stopped = any(r.get("partial", {}).get(key) for r in having)
        merged["partial"][key] = len(episodes) if stopped else None   # as one report: games played when stopped
        caches = [r["prefix_cache"][key] for r in having if key in r.get("prefix_cache", {})]
        if caches:
            queried, hits = (sum(c[f] for c in caches) for f in ("queried_tokens", "hit_tokens"))
            merged["prefix_cache"][key] = {"queried_tokens": queried, "hit_tokens": hits,
                                           "hit_pct": round(100 * hits / queried, 2) if queried else None}
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(merged, indent=1))
    (out / "eval.md").write_text(markdown(merged) + "\n")
    return merged


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from service.harness.state import VERBS
    unknown = sorted(set(args.disabled_verbs) - set(VERBS))
    if unknown:
        raise SystemExit(f"--disabled-verbs: unknown verb(s) {unknown}; the verbs are {list(VERBS)}")
    if args.merge:
        print(markdown(merge_reports(args.merge, Path(args.out or "runs/eval/merged"))))
        return 0

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from service.bank.evolver import new_bank
    from service.hardware import serving_dtype
    from service.policy.engines.vllm_local import VLLMEngine
    from service.policy.turns import Sampling
    from training.plots import plot_bars

    model = Path(args.model)
    bank_path = Path(args.bank) if args.bank else model / "bank.json"
    start_bank = json.loads(bank_path.read_text()) if bank_path.exists() else new_bank()
    out = Path(args.out or f"runs/eval/{model.name}")
    out.mkdir(parents=True, exist_ok=True)
    from service.policy.pretrained import resolve_policy_dir
    from service.settings import model_context_len
    context = min(args.max_model_len, model_context_len(str(resolve_policy_dir(model)), cap=args.max_model_len))
    engine = VLLMEngine(model, max_model_len=context, kv_cache_gib=args.kv_cache_gib,
                        enforce_eager=args.eager, dtype=args.dtype, engine_kwargs=args.engine_kwargs)
    sampling = Sampling(temperature=args.temperature, top_p=args.top_p,
                        seed=args.seed)
    report = {"model": str(model), "max_steps": args.max_steps, "n": args.n, "skip": args.skip, "results": {},
              "seconds": {},
              "concurrency": min(args.concurrency, args.window), "window": args.window, "bank_lag": args.bank_lag,
              "sampling": {"temperature": args.temperature, "top_p": args.top_p, "seed": sampling.seed},
              "dtype": serving_dtype(args.dtype),   # (the CPU build here; on a GPU, auto-cpu is vLLM's auto)
              "engine_kwargs": args.engine_kwargs,
              "ablation": {"call_budget": args.call_budget, "disabled_verbs": list(args.disabled_verbs)}}
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(model))
    from service.policy.render import transcript_chars_for
    # one engine and event loop for every split and mode
    policy = RecordingPolicy(engine, sampling=sampling, transcript_chars=transcript_chars_for(context),
                             call_budget=args.call_budget, disabled_verbs=tuple(args.disabled_verbs),
                             count_tokens=lambda text: len(tok(text, add_special_tokens=False)["input_ids"]))
    slots = EpisodeSlots(policy, min(args.concurrency, args.window), args.max_steps)
    try:
        for split in args.split:
            games = games_for(split, args.n and args.n + args.skip)[args.skip:]
            for mode in args.mode:
                started, key, total = time.perf_counter(), f"{split}/{mode}", len(games)
                cache0 = prefix_cache_tokens()

                def save(results, bank, key=key, started=started, total=total, cache0=cache0):
                    """The report so far: a stopped run keeps every finished window (``partial`` says how many
                    games of the split it covers)."""
                    report["results"][key] = summarize_mode(results, bank)
                    report["seconds"][key] = round(time.perf_counter() - started, 1)
                    chats = out / "transcripts" / key.replace("/", "-")
                    chats.mkdir(parents=True, exist_ok=True)
                    for row in results:   # each episode's whole chat, kept beside the report, not in it
                        if "transcript" in row:
                            (chats / f"{row['game']}.txt").write_text(row.pop("transcript"))
                    report.setdefault("episodes", {})[key] = results
                    report.setdefault("partial", {})[key] = None if len(results) == total else len(results)
                    queried, hits = (b - a for a, b in zip(cache0, prefix_cache_tokens()))
                    report.setdefault("prefix_cache", {})[key] = {
                        "queried_tokens": queried, "hit_tokens": hits,
                        "hit_pct": round(100 * hits / queried, 2) if queried else None}
                    (out / "eval.json").write_text(json.dumps(report, indent=1))
                    (out / "eval.md").write_text(markdown(report) + "\n")

                evaluate_one(slots, games, mode, json.loads(json.dumps(start_bank)), args.window,
                             lag=args.bank_lag, on_window=save)
    finally:
        slots.close()
        policy.close()
    table = markdown(report)
    (out / "eval.md").write_text(table + "\n")
    keys = list(report["results"])
    plot_bars(keys, [report["results"][k]["overall"]["success_pct"] for k in keys], out / "eval.png",
              f"success % ({model.name})", "success %")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
