"""python -m training.pipeline --out models/default-policy

The default policy end to end: games -> teacher -> base model -> SFT -> more (SFT continued on a second set of
train games) -> DAgger -> calls (SFT continued on episodes where a later commit is optional) -> GRPO -> export ->
evaluation -> model card.
``make policy`` runs this command (with ``OMP_NUM_THREADS=1``). Settings: ``PipelineConfig`` (``--help`` lists them;
``--config FILE.json`` reads them from a file, see ``training.cli``). There is no GPU preset: the GPU recipe in
docs/training.md runs the stages one by one.

Every stage is its own module with its own settings dataclass (``training.envs.alfworld.generate``,
``training.teacher``, ``model_init``, ``sft``, ``grpo``, ``export``, ``evaluate``, ``card``); this file only chains
them with the defaults below. Each stage's settings are written to ``<work>/configs/<stage>.json`` and the stage runs
as ``python -m <stage module> --config <that file>``, so the files say exactly what each stage ran with. Stages whose
output already exists are skipped (``--force`` reruns them), so an interrupted run resumes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from training import cli
from training.card import CardConfig
from training.envs.alfworld.generate import GenerateConfig
from training.evaluate import EvalConfig
from training.export import ExportConfig
from training.grpo import GRPORunConfig
from training.grpo_episodes import EpisodeGRPOConfig
from training.hardware import bf16_autocast_pays
from training.model_init import SIZES, ModelInitConfig
from training.reward import RewardConfig
from training.sft import SFTRunConfig
from training.teacher import TeacherConfig


@dataclass
class PipelineConfig:
    """Defaults of the shipped CPU policy (see docs/training.md for why)."""

    train_games: int = field(default=1100, metadata={
        "help": "generated train games: one SFT on 1,100 expert episodes (session 24) replaces SFT on 600 + two "
                "more rounds of 250 (sessions 6-22), the same demonstrations in one pass and one cosine; 600 is the "
                "benchmark's train split size"})
    verify_train_games: bool = field(default=False, metadata={
        "help": "check train games with the planner too (off: the search expert's wins filter them; the planner "
                "is 3-7 s of the ~0.3-7 s a game takes, about 30-60 min of 850 train games on two cores)"})
    work: str = field(default="runs/policy", metadata={"help": "intermediate outputs (and configs/)"})
    teacher_out: str = field(default="data/teacher", metadata={
        "help": "teacher data folder (with teacher_commit_episode_share below 1, the default becomes "
                "data/teacher-styles<share>, so data rendered in the other style is never reused)"})
    teacher_commit_episode_share: float = field(default=1.0, metadata={
        "help": "share of the teacher's inline episodes that commit at every subgoal change; the others never "
                "commit (training.teacher --commit-episode-share). Session 34: a 40-step continuation of the shipped "
                "adapter on share-0.5 data won 57/64 valid_unseen games at a call budget of 1, against 53 for the "
                "shipped adapter at that budget and 58 for it unbounded. 1 = the shipped teacher"})
    teacher_shards: int = field(default=2, metadata={
        "help": "parallel expert collectors (one per core), then one render pass"})
    base: str = field(default="smollm2-135m-instruct", metadata={
        "help": "packaged pretrained base (service.policy.pretrained), or a from-scratch size for a toy model "
                f"(tests): {', '.join(SIZES)}"})
    sft_steps: int = field(default=300, metadata={
        "help": "SFT optimizer steps of sft_batch whole episodes each (300 x 4 = 0.85 epoch of 1,100 inline + 20 pct "
                "always_on episodes; about 14 s per step on a 2-core AMD EPYC with bf16 autocast)"})
    sft_modes: dict = field(default_factory=lambda: {"inline": 1.0, "always_on": 0.2, "env_only": 0.0}, metadata={
        "help": "share of each mode's teacher episodes (JSON): inline is what is served; always_on is kept for the "
                "harness-token comparison"})
    lm_steps: int = field(default=0, metadata={
        "help": "LM stage (loss on every token): only useful for from-scratch toys"})
    sft_lr: float = field(default=3e-4, metadata={"help": "SFT peak learning rate"})
    sft_batch: int = field(default=4, metadata={"help": "episodes per SFT optimizer step"})
    sft_max_length: int = field(default=4096, metadata={"help": "tokens per episode"})
    lora_r: int = field(default=64, metadata={"help": "LoRA rank (pretrained base)"})
    lora_from_layer: int = field(default=12, metadata={
        "help": "first layer with adapters: on layers 12-29, the backward pass stops at layer 12"})
    bf16_autocast: bool = field(default=True, metadata={
        "help": "bf16 autocast in SFT where the CPU has avx512_bf16/AMX and a bf16 matmul beats fp32 (timed at "
                "run time, training.hardware)"})
    threads: int = field(default=2, metadata={"help": "torch threads for SFT and GRPO"})
    more_games: int = field(default=0, metadata={
        "help": "games of a second train set (seed more_seed, data/alfworld-more) whose expert episodes continue the "
                "SFT adapter (training.sft --init-adapter); 0 = off (the default since session 24: the sft "
                "stage's 1,100 train games hold the demonstrations the rounds added)"})
    more_plan: int = field(default=500, metadata={
        "help": "size of the second set's plan; its first more_games games are generated (a later run can add more)"})
    more_seed: int = field(default=8008, metadata={"help": "generator seed of the second train set"})
    more_steps: int = field(default=60, metadata={"help": "SFT steps on the second set (sft_batch episodes each)"})
    more_lr: float = field(default=2e-4, metadata={"help": "peak learning rate on the second set"})
    more_rounds: int = field(default=2, metadata={
        "help": "rounds of the more stage: round r plays the next more_games games of the second set's plan "
                "(games (r-1)*more_games ..) and continues the previous round's adapter more_steps on them "
                "(more_rounds * more_games <= more_plan). Session 21: round 2 alone at lr 2e-4 reached 98.3 pct "
                "held-out exact action but won 108/134 valid_unseen against round 1's 115; session 22: round 2 "
                "with round 1 replayed at lr 1e-4 won 116/134 and 36/40 valid_seen (shipped)"})
    more_later_lr: float | None = field(default=1e-4, metadata={
        "help": "peak learning rate of the more rounds after the first (default: more_lr)"})
    more_replay: bool = field(default=True, metadata={
        "help": "a later more round trains on the episodes of every round so far (training.sft --replay-data), not "
                "on its own games alone"})
    dagger_rounds: int = field(default=0, metadata={
        "help": "DAgger rounds after SFT: the policy plays train games, the search expert labels the states it "
                "reaches, the adapter trains dagger_steps more on those labels plus a share of the expert's "
                "episodes. 0 (off) until a round is shown to beat the SFT policy: session 7's round tied it on "
                "the games both played (docs/training.md)"})
    dagger_games: int = field(default=160, metadata={
        "help": "train games per round (round r plays the games after round r-1's)"})
    dagger_max_steps: int = field(default=30, metadata={"help": "environment steps per DAgger rollout"})
    dagger_steps: int = field(default=60, metadata={"help": "SFT steps per round (sft_batch sequences each)"})
    dagger_lr: float = field(default=1e-4, metadata={"help": "peak learning rate of a round"})
    dagger_train_from_layer: int = field(default=20, metadata={
        "help": "a round trains the adapters of this layer and above only (about half the backward pass)"})
    dagger_cap: int = field(default=4, metadata={
        "help": "sequences per DAgger episode (its first errors; a looping learner repeats one mistake many times)"})
    dagger_sources: dict = field(default_factory=lambda: {"dagger": 1.0, "search": 0.25}, metadata={
        "help": "share of each source's sequences in a round (JSON): the learner's labelled states and the "
                "expert's own episodes, so a round does not forget them"})
    calls_games: int = field(default=0, metadata={
        "help": "the calls stage (off at 0): the search expert plays this many train games committing only "
                "calls_commit_share of the later subgoal changes, and the adapter continues calls_steps on those "
                "inline episodes, so a later commit is a choice GRPO can drop rather than the only way the policy "
                "moves on (session 18: 160 games, 29/32 won either way; with 2 calls allowed 15/16 against 10/16; "
                "session 21, through the pipeline: 50/64 valid_unseen, 3.50 calls, held-out exact 89.8 pct)"})
    calls_commit_share: float = field(default=0.5, metadata={
        "help": "share of the later subgoal changes the calls stage's expert commits (training.teacher)"})
    calls_first_commit_share: float = field(default=1.0, metadata={
        "help": "share of the calls stage's episodes whose first turn the expert commits (training.teacher "
                "--first-commit-share): below 1 the first commit is a choice too"})
    calls_recall_share: float = field(default=1.0, metadata={
        "help": "share of the calls stage's episodes that recall on their first turn (training.teacher "
                "--recall-share): below 1 the recall is a choice too"})
    calls_steps: int = field(default=24, metadata={"help": "SFT steps of the calls stage (sft_batch episodes each)"})
    calls_lr: float = field(default=1e-4, metadata={"help": "peak learning rate of the calls stage"})
    calls_heldout_games: int = field(default=4, metadata={
        "help": "the calls stage's held-out games: the last ones of the train plan, which the sft stage held out "
                "and no stage trained on (the calls stage's own games are games the sft stage trained on)"})
    grpo_updates: int = field(default=0, metadata={
        "help": "GRPO updates; 0: no GRPO stage (on a pretrained base: training.grpo_episodes on the adapter). The "
                "other grpo_ defaults are session 32's recipe (8 games x 4 rollouts, half of them budget-1 twins, "
                "lr 2e-5, KL 0.05, cost 0.5 per call), which cut the shipped adapter's calls 3.89 -> 1.01 in 7 "
                "updates (docs/training.md)"})
    grpo_games: int = field(default=0, metadata={
        "help": "fresh train-split games (seed grpo_games_seed, in data/alfworld-grpo, planner-checked) that the "
                "GRPO rollouts play instead of the SFT's own train games; 0 = the SFT's train games (session 33: 64 "
                "fresh games cut the calls as well, 3.89 -> 1.01, but won 107/134 against the start adapter's 119)"})
    grpo_games_seed: int = field(default=9009, metadata={"help": "generator seed of the GRPO games"})
    grpo_group: int = field(default=4, metadata={"help": "GRPO rollouts per game"})
    grpo_games_per_update: int = field(default=8, metadata={"help": "GRPO games per update"})
    grpo_max_env_steps: int = field(default=30, metadata={"help": "GRPO environment steps per episode"})
    grpo_lr: float = field(default=2e-5, metadata={"help": "GRPO learning rate"})
    grpo_cost_per_call: float = field(default=0.5, metadata={"help": "GRPO reward's cost per harness call"})
    grpo_call_credit: float = field(default=0.0, metadata={
        "help": "GRPO: extra -c advantage on the tokens of every harness-call turn (training.grpo_episodes)"})
    grpo_advantage_floor: float | None = field(default=None, metadata={
        "help": "GRPO: clip episode advantages below at this value (training.grpo_episodes --advantage-floor)"})
    grpo_kl_beta: float = field(default=0.05, metadata={
        "help": "GRPO: per-token KL penalty to the SFT adapter (training.grpo_episodes --kl-beta)"})
    grpo_pg_turns: str = field(default="all", metadata={
        "help": "GRPO: all, or calls (policy gradient on harness-call turns only; training.grpo_episodes --pg-turns)"})
    grpo_cut_after_calls: bool = field(default=False, metadata={
        "help": "GRPO with grpo_pg_turns calls: each training sequence ends at its last harness-call token "
                "(training.grpo_episodes --cut-after-calls)"})
    grpo_loss_norm: str = field(default="episode", metadata={
        "help": "GRPO loss normalisation: token (DAPO) or episode (the original GRPO)"})
    grpo_lambda_div: float = field(default=0.0, metadata={
        "help": "GRPO verb-diversity bonus at update 0 (it rewards more verbs; 0 when the point is fewer calls)"})
    grpo_concurrency: int = field(default=16, metadata={"help": "GRPO rollout episodes in flight"})
    grpo_temperature: float = field(default=1.0, metadata={"help": "GRPO rollout sampling temperature"})
    grpo_no_call_share: float = field(default=0.5, metadata={
        "help": "GRPO: share of each group played as twins with at most grpo_twin_budget harness calls "
                "(training.grpo_episodes --no-call-share)"})
    grpo_twin_budget: int = field(default=1, metadata={"help": "GRPO: the twins' episode call budget"})
    grpo_div_anneal: int = field(default=4, metadata={
        "help": "U of the diversity bonus (the study: 150 updates; a 10-update CPU run needs it inside its horizon "
                "or the bonus outweighs the cost term)"})
    eval_n: int | None = field(default=None, metadata={"help": "games per split (all generated games when not given)"})
    eval_max_steps: int = field(default=50, metadata={"help": "environment steps per evaluated episode"})
    eval_concurrency: int = field(default=16, metadata={
        "help": "episodes in flight, and per bank consolidation window, in the evaluation (session 11: 16 played "
                "32 valid_unseen games in 228 s against 263 s with 8, the same 29 won)"})
    eval_kv_cache_gib: float = field(default=4.0, metadata={
        "help": "vLLM KV cache (SmolLM2 keeps ~23 KB per token in bf16, ~46 KB in fp32: 16 episodes of ~4k "
                "tokens need 1.5-3 GiB)"})
    eval_baseline_splits: list[str] = field(default_factory=lambda: ["valid_unseen"], metadata={
        "help": "splits the SFT baseline plays when GRPO ran (the GRPO target compares valid_unseen; each split "
                "is 4-20 min on two cores)"})
    eval_bank_lag: int = field(default=0, metadata={
        "help": "windows the bank a window starts with lags behind (training.evaluate --bank-lag): with 1 the next "
                "window fills the slots while a window's slowest (often lost, 50-step) episode finishes"})
    eval_other_modes: list[str] = field(default_factory=lambda: ["always_on"], metadata={
        "help": "modes evaluated on valid_unseen beside inline"})
    eval_other_modes_n: int | None = field(default=4, metadata={
        "help": "games for those modes (none: all): an always_on episode outgrows the transcript bound and loses "
                "its prefix cache, so 8 did not finish in 11 min (sessions 9-11) and 2 took 246 s (session 11); "
                "inline always plays every game"})
    eval_temperature: float = field(default=0.0, metadata={
        "help": "0 = greedy; the serving default must match (EVOHARNESS_TEMPERATURE)"})
    valid_seen_games: int = field(default=40, metadata={"help": "generated valid_seen games"})
    out: str = field(default="models/default-policy", metadata={"help": "policy folder"})
    remarks: str | None = field(default="docs/policy_remarks.md", metadata={
        "help": "hand-written part of the card (limits, what was tried)"})
    stages: list[str] = field(default_factory=lambda: ["games", "teacher", "base", "sft", "more", "dagger", "calls",
                                                        "grpo", "export", "eval"],
                              metadata={"help": "stages to run"})
    force: bool = field(default=False, metadata={"help": "rerun stages whose output exists"})

    def __post_init__(self):
        if self.teacher_commit_episode_share < 1 and self.teacher_out == "data/teacher":
            self.teacher_out = f"data/teacher-styles{self.teacher_commit_episode_share:g}"


RAN: list[dict] = []   # the stage commands this process ran (not those skipped as done), with their seconds


def _ran(commands: list[list[str]], t0: float) -> None:
    for args in commands:
        name = Path(args[-1]).stem if args[-2:-1] == ["--config"] else args[0]
        RAN.append({"stage": name, "seconds": round(time.perf_counter() - t0, 1)})


def sh(*args: str) -> None:
    print("+", " ".join(args), flush=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", *args], check=True)
    _ran([list(args)], t0)


def sh_parallel(commands: list[list[str]]) -> None:
    """Run ``python -m`` commands side by side; fail if any fails."""
    procs, t0 = [], time.perf_counter()
    for args in commands:
        print("+", " ".join(args), "&", flush=True)
        procs.append(subprocess.Popen([sys.executable, "-m", *args]))
    codes = [p.wait() for p in procs]
    _ran(commands, t0)
    if any(codes):
        raise subprocess.CalledProcessError(max(codes), commands[codes.index(max(codes))])


def stage(work: Path, name: str, module: str, cfg) -> list[str]:
    """Write ``cfg`` to ``<work>/configs/<name>.json``; the ``python -m`` arguments that run the stage with it."""
    return [module, "--config", str(cli.write_config(cfg, work / "configs" / f"{name}.json"))]


def run(cfg: PipelineConfig, force: bool = False) -> None:
    work = Path(cfg.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    def done(p) -> bool:
        return Path(p).exists() and not force

    if "games" in cfg.stages:
        generate = "training.envs.alfworld.generate"
        sh(*stage(work, "generate-train", generate, GenerateConfig(split="train", count=cfg.train_games,
                                                                             verify=cfg.verify_train_games)))
        sh(*stage(work, "generate-valid_seen", generate, GenerateConfig(split="valid_seen",
                                                                       count=cfg.valid_seen_games)))
        sh(*stage(work, "generate-valid_unseen", generate, GenerateConfig(split="valid_unseen")))
    if "teacher" in cfg.stages and not done(f"{cfg.teacher_out}/inline.jsonl"):
        teacher_stage(cfg, work, "teacher", "data/alfworld/train", cfg.teacher_out,
                      **({"commit_episode_share": cfg.teacher_commit_episode_share}
                         if cfg.teacher_commit_episode_share < 1 else {}))
    pretrained = cfg.base not in SIZES
    if pretrained:
        from service.policy.pretrained import ensure_base
        base = str(ensure_base(cfg.base)) if "base" in cfg.stages else f"data/base/{cfg.base}"
    else:
        base = str(work / f"base-{cfg.base}")
        if "base" in cfg.stages and not done(base):
            sh(*stage(work, "model_init", "training.model_init",
                      ModelInitConfig(size=cfg.base, corpus=[cfg.teacher_out], out=base)))
    if "sft" in cfg.stages and not done(work / "sft" / "model"):
        lora = {"lora": True, "lora_r": cfg.lora_r, "lora_from_layer": cfg.lora_from_layer} if pretrained else {}
        sh(*stage(work, "sft", "training.sft", SFTRunConfig(
            base=base, data=cfg.teacher_out, out=str(work / "sft"), max_steps=cfg.sft_steps, lm_steps=cfg.lm_steps,
            lr=cfg.sft_lr, batch=cfg.sft_batch, modes=cfg.sft_modes, max_length=cfg.sft_max_length,
            threads=cfg.threads, bf16=cfg.bf16_autocast and bf16_autocast_pays(), **lora)))
    adapter = work / "sft" / "adapter"
    bank = f"{cfg.teacher_out}/bank.json"
    if pretrained and "more" in cfg.stages and cfg.more_games:
        adapter, bank = more_stage(cfg, work, base, adapter, done)   # bank: the one its recalls were rendered with
    if pretrained and "dagger" in cfg.stages:
        adapter = dagger_rounds(cfg, work, base, adapter, done)
    if pretrained and "calls" in cfg.stages and cfg.calls_games:
        adapter = calls_stage(cfg, work, base, adapter, done)
        bank = f"{CALLS_TEACHER}/bank.json"
    sft_policy = None   # pretrained base + GRPO: the adapter before GRPO, exported as the baseline it is judged by
    if pretrained and "grpo" in cfg.stages and cfg.grpo_updates:
        if not done(work / "grpo" / "adapter"):
            grpo_games = "data/alfworld/train"
            if cfg.grpo_games:
                sh(*stage(work, "generate-grpo", "training.envs.alfworld.generate", GenerateConfig(
                    split="train", count=cfg.grpo_games, seed=cfg.grpo_games_seed, out=Path(GRPO_GAMES))))
                grpo_games = f"{GRPO_GAMES}/train"
            sh(*stage(work, "grpo", "training.grpo_episodes", EpisodeGRPOConfig(
                base=base, adapter=str(adapter), bank=bank, games=grpo_games, out=str(work / "grpo"),
                updates=cfg.grpo_updates,
                group=cfg.grpo_group, games_per_update=cfg.grpo_games_per_update,
                max_env_steps=cfg.grpo_max_env_steps, lr=cfg.grpo_lr, threads=cfg.threads,
                call_credit=cfg.grpo_call_credit, loss_norm=cfg.grpo_loss_norm, concurrency=cfg.grpo_concurrency,
                advantage_floor=cfg.grpo_advantage_floor, kl_beta=cfg.grpo_kl_beta, pg_turns=cfg.grpo_pg_turns,
                cut_after_calls=cfg.grpo_cut_after_calls, kv_cache_gib=cfg.eval_kv_cache_gib,
                temperature=cfg.grpo_temperature,
                no_call_share=cfg.grpo_no_call_share, twin_budget=cfg.grpo_twin_budget,
                reward=RewardConfig(cost_per_call=cfg.grpo_cost_per_call, div_anneal_updates=cfg.grpo_div_anneal,
                                    lambda_div_max=cfg.grpo_lambda_div))))
        if "export" in cfg.stages:
            sft_policy = work / "sft-policy"
            sh(*stage(work, "export-sft", "training.export", ExportConfig(
                model=base, adapter=str(adapter), base_name=cfg.base, out=str(sft_policy), bank=bank,
                temperature=cfg.eval_temperature)))
        adapter, bank = work / "grpo" / "adapter", str(work / "grpo" / "bank.json")
    elif "grpo" in cfg.stages and cfg.grpo_updates and not done(work / "grpo" / "model"):
        sh(*stage(work, "grpo", "training.grpo", GRPORunConfig(
            model=str(work / "sft" / "model"), out=str(work / "grpo"), updates=cfg.grpo_updates,
            group=cfg.grpo_group, games_per_update=cfg.grpo_games_per_update, max_env_steps=cfg.grpo_max_env_steps,
            lr=cfg.grpo_lr, threads=cfg.threads,
            reward=RewardConfig(cost_per_call=cfg.grpo_cost_per_call, div_anneal_updates=cfg.grpo_div_anneal))))
    final = work / "grpo" / "model" if (work / "grpo" / "model").exists() else work / "sft" / "model"
    if "export" in cfg.stages and pretrained and final == work / "sft" / "model":
        sh(*stage(work, "export", "training.export", ExportConfig(
            model=base, adapter=str(adapter), base_name=cfg.base, out=cfg.out, bank=bank,
            temperature=cfg.eval_temperature)))
    elif "export" in cfg.stages:  # the policy is served as it was evaluated
        sh(*stage(work, "export", "training.export", ExportConfig(
            model=str(final), out=cfg.out, bank=bank, temperature=cfg.eval_temperature)))
    if "eval" in cfg.stages:
        runs = [("policy", Path(cfg.out), ["valid_unseen", "valid_seen"], ["inline"], cfg.eval_n),
                ("policy-modes", Path(cfg.out), ["valid_unseen"], cfg.eval_other_modes,
                 min(filter(None, [cfg.eval_n, cfg.eval_other_modes_n]), default=None))]
        if sft_policy is not None:           # GRPO ran on the adapter: the adapter before it is the baseline
            runs.insert(0, ("sft", sft_policy, cfg.eval_baseline_splits, ["inline"], cfg.eval_n))
        elif final != work / "sft" / "model":  # GRPO ran: its SFT checkpoint is the baseline
            runs.insert(0, ("sft", work / "sft" / "model", cfg.eval_baseline_splits, ["inline"], cfg.eval_n))
        for label, model, splits, modes, n in runs:
            if not modes or (work / f"eval-{label}" / "eval.md").exists() and not force:
                continue
            sh(*stage(work, f"eval-{label}", "training.evaluate", EvalConfig(
                model=str(model), split=splits, mode=list(modes), n=n or None, max_steps=cfg.eval_max_steps,
                bank=f"{model}/bank.json" if model == sft_policy else bank,   # each with the bank it shipped with
                temperature=cfg.eval_temperature, kv_cache_gib=cfg.eval_kv_cache_gib,
                window=cfg.eval_concurrency, concurrency=cfg.eval_concurrency, bank_lag=cfg.eval_bank_lag,
                out=str(work / f"eval-{label}"))))
    seconds = round(time.perf_counter() - t0, 1)
    (work / "pipeline.json").write_text(json.dumps({"config": asdict(cfg), "seconds": seconds, "ran": RAN}, indent=1))
    if "export" in cfg.stages:
        sh(*stage(work, "card", "training.card", CardConfig(
            policy=cfg.out, work=str(work), teacher=cfg.teacher_out, calls_teacher=CALLS_TEACHER,
            remarks=cfg.remarks if cfg.remarks and Path(cfg.remarks).exists() else None)))


def teacher_stage(cfg: PipelineConfig, work: Path, label: str, games_dir: str, out: str, **extra) -> None:
    """The search expert plays ``games_dir`` (``teacher_shards`` processes side by side), then one render.
    ``extra``: more ``TeacherConfig`` settings, the same for every shard."""
    teacher = TeacherConfig(games_dir=games_dir, out=out, **extra)
    if cfg.teacher_shards > 1:
        k = cfg.teacher_shards
        sh_parallel([stage(work, f"{label}-shard{i}of{k}", "training.teacher", TeacherConfig(
            games_dir=games_dir, out=out, shard=f"{i}/{k}", **extra)) for i in range(k)])
        teacher.render_only = True
    sh(*stage(work, label, "training.teacher", teacher))


MORE_GAMES, MORE_TEACHER = "data/alfworld-more", "data/teacher-more"
GRPO_GAMES = "data/alfworld-grpo"


def more_stage(cfg: PipelineConfig, work: Path, base: str, adapter: Path, done) -> tuple[Path, str]:
    """More demonstrations without a second SFT from scratch: generate train games with another seed, let the search
    expert play them, and continue the adapter on those episodes, ``more_games`` new games per round (round 1:
    ``<work>/more`` on ``data/teacher-more``; round r: ``<work>/more-r<r>`` on ``data/teacher-more-r<r>``, whose bank
    starts from the round before's; with ``more_replay`` it trains on the earlier rounds' episodes too). Each round's
    held-out games are its last games, which no stage trained on.
    Returns the last round's adapter and the bank its episodes were rendered with."""
    bank = None
    for r in range(1, cfg.more_rounds + 1):
        tag = "" if r == 1 else f"-r{r}"
        out, teacher = work / f"more{tag}", more_teacher(r)
        if not done(out / "adapter"):
            sh(*stage(work, f"generate-more{tag}", "training.envs.alfworld.generate", GenerateConfig(
                split="train", count=cfg.more_plan, first=r * cfg.more_games, seed=cfg.more_seed,
                out=Path(MORE_GAMES), verify=cfg.verify_train_games)))
            if not done(f"{teacher}/inline.jsonl"):
                teacher_stage(cfg, work, f"teacher-more{tag}", f"{MORE_GAMES}/train", teacher,
                              n_games=cfg.more_games,   # round 1 too: later rounds' games may be on disk
                              **({} if r == 1 else {"first_game": (r - 1) * cfg.more_games, "initial_bank": bank}))
            sh(*stage(work, f"more{tag}-sft", "training.sft", SFTRunConfig(
                base=base, data=teacher, out=str(out), max_steps=cfg.more_steps,
                lr=cfg.more_lr if r == 1 or cfg.more_later_lr is None else cfg.more_later_lr,
                batch=cfg.sft_batch, modes=cfg.sft_modes, max_length=cfg.sft_max_length, threads=cfg.threads,
                bf16=cfg.bf16_autocast and bf16_autocast_pays(), init_adapter=str(adapter), seed=r,
                replay_data=[more_teacher(k) for k in range(1, r)] if cfg.more_replay else [])))
        adapter, bank = out / "adapter", f"{teacher}/bank.json"
    return adapter, bank


def more_teacher(r: int) -> str:
    """The teacher folder of the more stage's round ``r``."""
    return MORE_TEACHER if r == 1 else f"{MORE_TEACHER}-r{r}"


CALLS_TEACHER, CALLS_HELDOUT = "data/teacher-calls", "data/teacher-calls-heldout"


def calls_stage(cfg: PipelineConfig, work: Path, base: str, adapter: Path, done) -> Path:
    """Teach that a later commit is optional (``<work>/calls``): the search expert replays the first ``calls_games``
    train games committing only ``calls_commit_share`` of the later subgoal changes (at the others its next
    environment turn's think names the new subgoal), and the adapter continues on those inline episodes. The sft stage
    trained on those games, so the held-out turns come from the train plan's last ``calls_heldout_games`` games
    (held out by the sft stage too), played by the same expert from the bank the policy is served with. Returns the
    continued adapter."""
    out = work / "calls"
    if done(out / "adapter"):
        return out / "adapter"
    if not done(f"{CALLS_TEACHER}/inline.jsonl"):
        teacher_stage(cfg, work, "teacher-calls", "data/alfworld/train", CALLS_TEACHER,
                      n_games=cfg.calls_games, commit_share=cfg.calls_commit_share,
                      first_commit_share=cfg.calls_first_commit_share,
                      recall_share=cfg.calls_recall_share)
    heldout = None
    if cfg.calls_heldout_games:   # the whole train plan (cached when the games stage made it), for its last games
        sh(*stage(work, "generate-train", "training.envs.alfworld.generate", GenerateConfig(
            split="train", count=cfg.train_games, verify=cfg.verify_train_games)))
        if not done(f"{CALLS_HELDOUT}/inline.jsonl"):
            teacher_stage(cfg, work, "teacher-calls-heldout", "data/alfworld/train", CALLS_HELDOUT,
                          first_game=cfg.train_games - cfg.calls_heldout_games, n_games=cfg.calls_heldout_games,
                          commit_share=cfg.calls_commit_share, initial_bank=f"{CALLS_TEACHER}/bank.json",
                          first_commit_share=cfg.calls_first_commit_share,
                          recall_share=cfg.calls_recall_share)
        heldout = CALLS_HELDOUT
    sh(*stage(work, "calls-sft", "training.sft", SFTRunConfig(
        base=base, data=CALLS_TEACHER, holdout_data=heldout, out=str(out), max_steps=cfg.calls_steps,
        lr=cfg.calls_lr, batch=cfg.sft_batch,
        modes={"inline": 1.0, "always_on": 0.0, "env_only": 0.0}, max_length=cfg.sft_max_length,
        threads=cfg.threads, bf16=cfg.bf16_autocast and bf16_autocast_pays(), init_adapter=str(adapter), seed=2)))
    return out / "adapter"


def dagger_rounds(cfg: PipelineConfig, work: Path, base: str, adapter: Path, done) -> Path:
    """Run the DAgger rounds (``training.dagger``); returns the last round's adapter.

    Round r: export the current adapter as a served policy folder, let it play ``dagger_games`` train games (the
    search expert labels every state it reaches), re-render the teacher data with those trajectories, and train the
    adapter on (``training.sft --init-adapter``). Each round's rollout report (``<teacher>/dagger-train.r<r>.json``)
    is also the measure of the policy that played it: success on train games it never trained on."""
    from training.dagger import DaggerConfig

    bank = f"{cfg.teacher_out}/bank.json"
    for r in range(1, cfg.dagger_rounds + 1):
        rd = work / f"dagger-r{r}"
        if done(rd / "adapter"):
            adapter = rd / "adapter"
            continue
        learner = rd / "learner"
        if not done(learner / "policy.json"):
            sh(*stage(work, f"dagger-r{r}-export", "training.export", ExportConfig(
                model=base, adapter=str(adapter), base_name=cfg.base, out=str(learner), bank=bank)))
        if not done(Path(cfg.teacher_out) / f"dagger-train.r{r}.json"):
            sh(*stage(work, f"dagger-r{r}-rollouts", "training.dagger", DaggerConfig(
                model=str(learner), n=cfg.dagger_games, skip=(r - 1) * cfg.dagger_games, out=cfg.teacher_out,
                round=r, max_steps=cfg.dagger_max_steps, concurrency=8, kv_cache_gib=cfg.eval_kv_cache_gib)))
        sh(*stage(work, f"dagger-r{r}-render", "training.teacher", TeacherConfig(
            games_dir="data/alfworld/train", out=cfg.teacher_out, render_only=True)))
        sh(*stage(work, f"dagger-r{r}-sft", "training.sft", SFTRunConfig(
            base=base, data=cfg.teacher_out, out=str(rd), max_steps=cfg.dagger_steps, lr=cfg.dagger_lr,
            batch=cfg.sft_batch, modes=cfg.sft_modes, max_length=cfg.sft_max_length, threads=cfg.threads,
            bf16=cfg.bf16_autocast and bf16_autocast_pays(), init_adapter=str(adapter),
            train_from_layer=cfg.dagger_train_from_layer, sources=cfg.dagger_sources, dagger_cap=cfg.dagger_cap,
            seed=r)))
        adapter = rd / "adapter"
    return adapter


def parse_args(argv: list[str] | None = None) -> PipelineConfig:
    return cli.parse(PipelineConfig, argv, __doc__)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    run(cfg, cfg.force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
