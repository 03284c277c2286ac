"""PNG plots of training and evaluation curves (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_sft(logs: list[dict], path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for stage in ("lm", "sft"):
        pts = [(h["step"], h["loss"]) for h in logs if h.get("stage") == stage and "loss" in h]
        if pts:
            ax.plot(*zip(*pts), label=stage)
    ax.set_xlabel("step"), ax.set_ylabel("loss"), ax.set_yscale("log"), ax.legend(), ax.set_title("SFT loss")
    fig.tight_layout(), fig.savefig(path, dpi=90), plt.close(fig)


def plot_curves(rows: list[dict], keys: list[str], path: Path, title: str, x: str = "update") -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3))
    for ax, key in zip(axes if len(keys) > 1 else [axes], keys):
        ax.plot([r[x] for r in rows], [r[key] for r in rows], marker="o")
        ax.set_title(key, fontsize=9), ax.set_xlabel(x)
    fig.suptitle(title), fig.tight_layout(), fig.savefig(path, dpi=90), plt.close(fig)


def plot_bars(labels: list[str], values: list[float], path: Path, title: str, ylabel: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(labels, values)
    ax.set_ylabel(ylabel), ax.set_title(title)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right", fontsize=8)
    fig.tight_layout(), fig.savefig(path, dpi=90), plt.close(fig)
