"""Harness state H_t = (Belief, Progress, Experience view) plus the bookkeeping of one session.

The state is a plain dict so that it serialises to JSON, diffs as RFC 6902 JSON Patch
and can be rebuilt from its audit log. `new_state` is the only constructor.
"""

from __future__ import annotations

from typing import Any

MODES = ("inline", "always_on", "env_only")
MODULES = ("belief", "progress", "experience")
VERBS = ("track", "commit", "recall", "note")
# Which module each verb needs; switching a module off removes its verbs (and its panel).
VERB_MODULE = {"track": "belief", "commit": "progress", "recall": "experience", "note": "experience"}

SUBGOAL_STATUSES = ("open", "partial", "complete", "blocked", "dropped")
FINISHED_STATUSES = ("complete", "dropped", "blocked")

DEFAULT_HARNESS_CAP = 3       # harness calls allowed inside one step before an env action is forced
DEFAULT_PROGRESS_CAP = 8      # committed subgoals kept; finished ones are evicted first
DEFAULT_HISTORY_WINDOW = 6    # recent (action, observation) pairs kept in state and prompt
DEFAULT_NOTES_CAP = 16        # notes a session may propose before its episode ends


def new_state(
    *,
    task: str,
    domain: str,
    mode: str,
    bank: str,
    initial_belief: dict,
    modules: dict[str, bool] | None = None,
    harness_cap: int = DEFAULT_HARNESS_CAP,
    max_steps: int | None = None,
    history_window: int = DEFAULT_HISTORY_WINDOW,
    transcript_chars: int | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    mods = {m: True for m in MODULES}
    for k, v in (modules or {}).items():
        if k not in MODULES:
            raise ValueError(f"unknown module {k!r}; modules are {MODULES}")
        mods[k] = bool(v)
    return {
        "task": task,
        "domain": domain,
        "mode": mode,
        "bank": bank,
        "metadata": dict(metadata or {}),
        "modules": mods,
        "controls": {"disabled_verbs": [], "harness_cap": harness_cap, "pinned_beliefs": {}},
        "belief": initial_belief,
        "progress": {"subgoals": [], "cap": DEFAULT_PROGRESS_CAP},
        "first_seen": {},  # object -> the receptacle it was first seen at (teaches search priorities)
        "notes": [],
        "recalled": [],
        "history": [],
        "transcript": [],           # the episode as chat messages (service.policy.render); the prompt is built from it
        "observation_shown": False,  # whether the transcript already holds the newest observation
        "transcript_chars": transcript_chars,  # bound on the transcript (None: the renderer's default)
        "history_window": history_window,
        "observation": None,
        "admissible": None,
        "last_action": None,
        "last_result": None,
        "budget": {"max_steps": max_steps, "used": 0, "env_steps": 0, "harness_calls": 0},
        "step_harness_calls": 0,
        "status": "active",
        "won": None,
        "done": False,
    }
