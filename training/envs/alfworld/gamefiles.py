"""Game folders as alfworld's loaders read them: ``traj_data.json`` + ``game.tw-pddl``.

``game.tw-pddl`` is JSON with ``pddl_domain`` (alfworld's ``alfred.pddl``), ``grammar`` (``alfred.twl2`` with the
task text filled in by alfworld's ``add_task_to_grammar``), ``pddl_problem``, ``solvable`` and ``walkthrough``.
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path

from .paths import GAME_FILE, TRAJ_FILE, ensure_alfworld_home

_TASK_PREFIX = "Your task is to: "


@functools.lru_cache(maxsize=1)
def domain_and_grammar() -> tuple[str, str]:
    ensure_alfworld_home()
    import alfworld.info as info
    return Path(info.ALFRED_PDDL_PATH).read_text(), Path(info.ALFRED_TWL2_PATH).read_text()


def grammar_with_task(traj_data: dict, seed: str) -> tuple[str, str]:
    """alfworld's grammar with the task line filled by alfworld's own templates; returns (grammar, task text).

    ``add_task_to_grammar`` picks its template with the global ``random``; it is seeded here and restored after,
    so the choice is reproducible and the caller's random state is untouched.
    """
    from alfworld.agents.utils.misc import add_task_to_grammar

    _, grammar = domain_and_grammar()
    state = random.getstate()
    try:
        random.seed(seed)
        filled = add_task_to_grammar(grammar, traj_data)
    finally:
        random.setstate(state)
    start = grammar.index("UNKNOWN GOAL")
    end = filled.index('."', start)
    return filled, filled[start:end]


def write_game(folder: Path, traj_data: dict, game_data: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TRAJ_FILE).write_text(json.dumps(traj_data, indent=1, sort_keys=True) + "\n")
    (folder / GAME_FILE).write_text(json.dumps(game_data, sort_keys=True) + "\n")
    return folder / GAME_FILE


def read_traj(game: Path | str) -> dict:
    path = Path(game)
    folder = path if path.is_dir() else path.parent
    return json.loads((folder / TRAJ_FILE).read_text())


def read_game(game: Path | str) -> dict:
    path = Path(game)
    return json.loads((path / GAME_FILE if path.is_dir() else path).read_text())


def split_intro(intro: str) -> tuple[str, str]:
    """Split the first observation into (room description, task text)."""
    head, sep, task = intro.partition(_TASK_PREFIX)
    if not sep:
        return intro.strip(), ""
    return head.strip(), task.strip().rstrip(".")
