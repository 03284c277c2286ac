"""python -m training.dagger --model runs/policy/sft-export --games data/alfworld/train --n 200 --round 1

DAgger: the trained policy plays train games; the search expert labels every state the policy reaches. Settings:
``DaggerConfig`` (``--help`` lists them; ``--config FILE.json`` reads them from a file, see ``training.cli``).

The policy plays through the service's runtime and the vLLM engine exactly as in evaluation (inline mode, greedy,
``--concurrency`` episodes at once). At each environment step, ``training.search_expert.SearchExpert`` reads the
Belief that perception built from the same observations and names the action it would take. The trajectory
(observations, the policy's executed actions, the expert's labels) is appended to ``<out>/dagger-train.r<round>.jsonl``
game by game, so an interrupted round resumes where it stopped (the report covers the games in the file);
``training.teacher --render-only`` then renders it with the other trajectories: the prompt follows what the policy
did, the completion is the expert's label. Where they differ, the episode's sequence ends at that turn and the next
turn starts a new sequence (``training.sft.episodes_of``), so the policy learns to recover from its own mistakes.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from training import cli
from training.evaluate import RecordingPolicy


@dataclass
class DaggerConfig:
    """DAgger round settings."""

    model: str = field(metadata={"help": "policy folder (as served; a policy.json folder works)"})
    games: str = field(default="data/alfworld/train", metadata={"help": "folder of train games"})
    n: int = field(default=200, metadata={"help": "games (the first N of the folder, in order)"})
    skip: int = field(default=0, metadata={"help": "skip the first N games (another round's)"})
    out: str = field(default="data/teacher", metadata={"help": "teacher folder the trajectories go to"})
    round: int = field(default=1, metadata={"help": "round number (names the output files)"})
    max_steps: int = field(default=30, metadata={"help": "env steps per episode (a lost policy loops)"})
    concurrency: int = field(default=4, metadata={"help": "episodes in flight at once"})
    kv_cache_gib: float = field(default=1.0, metadata={"help": "vLLM KV cache size"})
    dtype: str = field(default="float32", metadata={"help": "vLLM dtype"})
    eager: bool = field(default=False, metadata={"help": "skip torch.compile (fast start, ~2x slower decode)"})


class LabelingPolicy(RecordingPolicy):
    """RecordingPolicy that also keeps, per episode, every observation with the expert's label for it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from service.domains import get_domain
        from training.search_expert import SearchExpert
        self.domain, self.expert = get_domain("alfworld"), SearchExpert()
        self.traj: dict | None = None

    def fork(self) -> LabelingPolicy:
        twin = super().fork()
        twin.traj = None
        return twin

    def reset(self, task: str, observation: str, admissible: list[str]) -> None:
        super().reset(task, observation, admissible)
        self.traj = {"task_text": task, "steps": [], "actions": [], "labels": [], "belief": None}

    def act(self, observation, admissible, won, done):
        t = self.traj
        last = t["actions"][-1] if t["actions"] else None
        t["belief"] = self.domain.perceive(t["belief"] or self.domain.initial_belief(t["task_text"]), observation,
                                           last)
        t["steps"].append({"observation": observation, "admissible": list(admissible), "won": bool(won)})
        if done:
            out = super().act(observation, admissible, won, done)
            self.episodes[-1]["dagger"] = {k: v for k, v in t.items() if k != "belief"}
            return out
        t["labels"].append(self.expert.act(t["belief"], admissible))
        action, info = super().act(observation, admissible, won, done)
        t["actions"].append(action)
        return action, info


def parse_args(argv: list[str] | None = None) -> DaggerConfig:
    return cli.parse(DaggerConfig, argv, __doc__)


def report(trajs: list[dict], seconds: float) -> dict:
    """The round's rollout report: how the learner did on these games and how often it agreed with the expert."""
    agree = sum(a == b for t in trajs for a, b in zip(t["actions"], t["labels"]))
    total = sum(len(t["labels"]) for t in trajs)
    return {"games": len(trajs), "policy_won": sum(bool(t["won"]) for t in trajs), "steps": total,
            "agreement": round(agree / max(1, total), 3), "seconds": round(seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from training.envs.alfworld.paths import list_games

    games = [g for g in list_games(args.games) if not g.name.startswith(".")][args.skip:args.skip + args.n]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"dagger-train.r{args.round}.jsonl"
    # resumable: games already in the file (an interrupted round) are not played again
    have = {t["game"]: t for t in map(json.loads, path.read_text().splitlines())} if path.exists() else {}
    todo = [g for g in games if g.name not in have]
    started = time.perf_counter()
    if todo:
        with path.open("a") as f:
            for traj in play(args, todo):
                f.write(json.dumps(traj) + "\n")
                f.flush()
                have[traj["game"]] = traj
    stats_path = out / f"dagger-train.r{args.round}.json"
    before = json.loads(stats_path.read_text()).get("seconds", 0.0) if stats_path.exists() else 0.0
    rep = report([have[g.name] for g in games if g.name in have], before + time.perf_counter() - started)
    stats_path.write_text(json.dumps(rep, indent=1))
    print(json.dumps(rep))
    return 0


def play(args: DaggerConfig, games: list[Path]):
    """The learner plays ``games`` (``concurrency`` at a time); yields each trajectory with the expert's labels, in
    game order."""
    from concurrent.futures import ThreadPoolExecutor

    from transformers import AutoTokenizer

    from service.bank.evolver import new_bank
    from service.policy.engines.vllm_local import VLLMEngine
    from service.policy.pretrained import resolve_policy_dir
    from training.evaluate import EpisodeSlots

    model = Path(args.model)
    tok = AutoTokenizer.from_pretrained(str(resolve_policy_dir(model)))
    engine = VLLMEngine(model, max_model_len=4096, kv_cache_gib=args.kv_cache_gib, enforce_eager=args.eager,
                        dtype=args.dtype)
    bank_path = model / "bank.json"
    bank = json.loads(bank_path.read_text()) if bank_path.exists() else new_bank()
    policy = LabelingPolicy(engine, bank=bank,
                            count_tokens=lambda text: len(tok(text, add_special_tokens=False)["input_ids"]))
    slots = EpisodeSlots(policy, args.concurrency, args.max_steps)
    try:
        with ThreadPoolExecutor(args.concurrency) as pool:
            for game, (row, _) in zip(games, pool.map(slots.play, games)):
                d = row["dagger"]
                yield {"game": game.name, "task_text": d["task_text"], "task_type": row["task_type"],
                       "won": row["won"], "steps": d["steps"], "actions": d["actions"], "labels": d["labels"],
                       "expert": "dagger", "round": args.round}
    finally:
        slots.close()
        policy.close()


if __name__ == "__main__":
    raise SystemExit(main())
