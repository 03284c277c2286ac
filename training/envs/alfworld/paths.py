"""Where ALFWorld things live: the package's data home, generated splits and the committed fixtures.

Importing ``alfworld`` creates the folder named by ``ALFWORLD_DATA`` (``~/.cache/alfworld`` by default), so
:func:`ensure_alfworld_home` points it at the project's gitignored ``data/`` folder first. Call it before any
``import alfworld``.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
DATA_ROOT = REPO_ROOT / "data" / "alfworld"
FIXTURES_DIR = REPO_ROOT / "tests" / "fixtures" / "alfworld"
FIXTURES_ARCHIVE = FIXTURES_DIR / "games.tar.xz"
GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"


def ensure_alfworld_home() -> str:
    """Set ``ALFWORLD_DATA`` to ``data/alfworld-home`` unless the caller already chose a folder."""
    home = os.environ.setdefault("ALFWORLD_DATA", str(REPO_ROOT / "data" / "alfworld-home"))
    Path(home).mkdir(parents=True, exist_ok=True)
    return home


def split_dir(split: str, root: Path | str | None = None) -> Path:
    """Cache folder of a generated split, ``data/alfworld/<split>`` by default."""
    return Path(root) / split if root is not None else DATA_ROOT / split


def game_file(game: Path | str) -> Path:
    """Accept a game folder or its ``game.tw-pddl`` and return the ``game.tw-pddl`` path."""
    path = Path(game)
    return path / GAME_FILE if path.is_dir() else path


def list_games(folder: Path | str) -> list[Path]:
    """All game folders (holding ``game.tw-pddl``) under ``folder``, sorted by path."""
    return sorted(p.parent for p in Path(folder).rglob(GAME_FILE))


def fixture_games() -> list[Path]:
    """The small committed fixture set (two games per task type), unpacked on first use.

    The games are committed as one ``games.tar.xz`` (each game repeats alfworld's 30 kB domain and grammar, which
    compress away); they unpack under ``data/alfworld/fixtures-<hash>/`` so a changed archive gets a fresh folder.
    """
    digest = hashlib.sha256(FIXTURES_ARCHIVE.read_bytes()).hexdigest()[:12]
    target = DATA_ROOT / f"fixtures-{digest}"
    if not (target / ".complete").exists():
        tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        with tarfile.open(FIXTURES_ARCHIVE) as tar:
            tar.extractall(tmp, filter="data")
        (tmp / ".complete").write_text(digest)
        try:
            tmp.rename(target)
        except OSError:  # another process unpacked it first
            pass
    return list_games(target)
