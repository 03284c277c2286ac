"""Write the policy's MODEL_CARD.md from what the pipeline measured (teacher stats, SFT, GRPO, evaluations).

    CPU/GPU:  python -m training.card --policy models/default-policy --work runs/policy --teacher data/teacher

Every figure is read from the run's own reports; nothing is typed in by hand except ``--remarks``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from training.export import model_card


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


def sft_section(work: Path) -> str:
    rep = _read(work / "sft" / "sft_report.json")
    if not rep:
        return "not available"
    cfg = rep["config"]
    losses = [h for h in rep["log"] if "loss" in h]
    first, last = (f"{losses[0]['loss']:.3f}", f"{losses[-1]['loss']:.3f}") if losses else (None, None)
    focus = (f", then {cfg['focus_steps']} focus steps (decision turns upsampled, lr {cfg.get('focus_lr')})"
             if cfg.get("focus_steps") else "")
    before = (f"; before the focus stage: `{json.dumps(rep['constrained_eval_before_focus'])}`"
              if rep.get("constrained_eval_before_focus") else "")
    return (f"TRL SFTTrainer, completion-only loss, full fine-tune; LM steps {cfg.get('lm_steps', 0)} (loss on whole "
            f"transcripts), then SFT steps {cfg['max_steps']}, lr {cfg['lr']}{focus}; batch {cfg['batch']}, max length "
            f"{cfg.get('max_length')}, modes {cfg['modes']}; {rep['train_rows']} train rows; wall {rep['seconds']} s. "
            f"Loss {first} → {last}.\n\nConstrained accuracy on held-out games (greedy, service grammar): "
            f"`{json.dumps(rep['constrained_eval'])}`{before}" + (f"\n\n{rep['note']}" if rep.get("note") else ""))


def grpo_section(work: Path) -> str:
    path = work / "grpo" / "grpo_log.jsonl"
    if not path.exists():
        return "not run"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    cfg = _read(work / "grpo" / "grpo_config.json") or {}
    keys = ["update", "reward", "success", "harness_calls_per_episode", "tokens_per_episode",
            "harness_tokens_per_episode", "kl", "seconds"]
    table = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    table += ["| " + " | ".join(f"{r[k]:.3g}" if isinstance(r[k], float) else str(r[k]) for k in keys) + " |"
              for r in rows]
    brief = {k: cfg.get(k) for k in ("updates", "games_per_update", "group", "max_env_steps", "lr", "beta",
                                      "temperature")}
    return (f"Per-turn GRPO over episode returns (training/grpo.py), config `{json.dumps(brief)}`, reward "
            f"`{json.dumps(cfg.get('reward'))}`.\n\n" + "\n".join(table))


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write MODEL_CARD.md from the run's reports.")
    ap.add_argument("--policy", default="models/default-policy")
    ap.add_argument("--work", default="runs/policy")
    ap.add_argument("--teacher", default="data/teacher")
    ap.add_argument("--remarks", default=None, help="markdown file with remarks (limits, what was tried)")
    args = ap.parse_args(argv)
    work, policy = Path(args.work), Path(args.policy)
    base = _read(next(work.glob("base-*/base_model.json"), Path("-"))) or {}
    sections = {"Base model": f"`{json.dumps(base)}`" if base else "pretrained (see config.json)",
                "Teacher data": teacher_section(Path(args.teacher)),
                "SFT": sft_section(work), "GRPO": grpo_section(work)}
    for label in ("policy", "sft"):
        md = work / f"eval-{label}" / "eval.md"
        ev = _read(work / f"eval-{label}" / "eval.json")
        if md.exists() and ev:
            secs = ", ".join(f"{k}: {v} s" for k, v in ev["seconds"].items())
            games = "all games of each generated split" if not ev["n"] else \
                f"{ev['n']} games per split (first N of the generated split)"
            samp = ev.get("sampling") or {"temperature": 0.0}
            how = "greedy" if not samp["temperature"] else \
                f"sampled at temperature {samp['temperature']}, top-p {samp.get('top_p', 1.0)}"
            sections[f"Evaluation ({label})"] = (f"{games}, max {ev['max_steps']} env steps (harness calls spend "
                                                 f"steps), {how} under the grammar, vLLM CPU engine. "
                                                 f"Wall: {secs}.\n\n" + md.read_text())
    pipe = _read(work / "pipeline.json")
    if pipe:
        sections["Wall time"] = f"pipeline {pipe['seconds']} s"
    if args.remarks:
        sections["Remarks"] = Path(args.remarks).read_text()
    params = (base or {}).get("params", 0)
    model_card(policy, params, sections)
    copy_plots(work, policy)
    print((policy / "MODEL_CARD.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
