"""One ALFWorld game at a time on the real TextWorld PDDL engine, with alfworld's own wrappers.

    env = AlfWorldEnv(expert_type="handcoded", max_steps=50)
    first = env.reset(game_folder)   # {observation, task, admissible_actions, won, done, steps, ...}
    result = env.step("go to fridge 1")   # {observation, admissible_actions, won, done, steps, ...}

Wrappers: ``AlfredDemangler`` (display names such as "apple 1"), ``AlfredInfos`` (game file in the infos) and,
when an expert is requested, ``AlfredExpert`` (``planner``: Fast Downward, optimal and privileged;
``handcoded``: alfworld's exploring expert). ``result["expert_plan"]`` then holds the expert's next action(s).
The patches in :mod:`.patches` are applied on construction. ``done`` is ``won`` or the step budget spent; every
command counts, including invalid ones (the engine answers "Nothing happens.").

The handcoded expert breaks ties with Python's global ``random``; the env gives it a private random state seeded
per game, so expert runs are reproducible and the caller's ``random`` is left alone.
"""

from __future__ import annotations

import random
from pathlib import Path

from . import patches
from .gamefiles import read_traj, split_intro
from .paths import ensure_alfworld_home, game_file

EXPERT_TYPES = ("planner", "handcoded")
_BANNER = "-= Welcome to TextWorld, ALFRED! =-"


class AlfWorldEnv:
    def __init__(self, expert_type: str | None = None, max_steps: int = 50, seed: int = 0,
                 apply_patches: bool = True):
        if expert_type not in (None, *EXPERT_TYPES):
            raise ValueError(f"expert_type must be one of {EXPERT_TYPES} or None, not {expert_type!r}")
        ensure_alfworld_home()
        if apply_patches:
            patches.apply()
        self.expert_type = expert_type
        self.max_steps = max_steps
        self.seed = seed
        self._env = None
        self._random_state = None
        self.game: Path | None = None
        self.traj_data: dict = {}
        self.steps = 0
        self.won = False
        self.done = True
        self.expert_plan: list[str] = []
        self.expert_failed = False

    # -- engine -----------------------------------------------------------------------------------------------
    def _start(self, path: Path):
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredInfos

        extras = ["gamefile"] + (["expert_plan"] if self.expert_type else [])
        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=extras)
        wrappers = [AlfredDemangler(), AlfredInfos]
        if self.expert_type:
            wrappers.append(AlfredExpert(expert_type=self.expert_type))
        return textworld.start(str(path), request_infos=infos, wrappers=wrappers)

    def _call(self, fn, *args):
        """Run an engine call with the expert's private random state (see module docstring)."""
        outer = random.getstate()
        random.setstate(self._random_state)
        try:
            return fn(*args)
        finally:
            self._random_state = random.getstate()
            random.setstate(outer)

    def _expert(self, state) -> list[str]:
        if not self.expert_type:
            return []
        return list(state.get("extra.expert_plan") or [])

    # -- API ----------------------------------------------------------------------------------------------------
    def reset(self, game: Path | str) -> dict:
        path = game_file(game)
        if self._env is None:
            self._env = self._start(path)
        else:
            self._env.load(str(path))
        self.game = path.parent
        self.traj_data = read_traj(path)
        self._random_state = random.Random(f"alfworld-expert/{self.seed}/{self.game.name}").getstate()
        state = self._call(self._env.reset)
        self.steps, self.won, self.done = 0, bool(state["won"]), bool(state["won"])
        self.expert_failed = False
        self.expert_plan = self._expert(state)
        intro = state["feedback"].replace(_BANNER, "").strip()
        observation, task = split_intro(intro)
        return {"observation": observation, "task": task, "admissible_actions": list(state["admissible_commands"]),
                "won": self.won, "done": self.done, "steps": 0, "intro": intro,
                "task_type": self.traj_data.get("task_type", ""), "expert_plan": list(self.expert_plan)}

    def step(self, action: str) -> dict:
        if self._env is None or self.game is None:
            raise RuntimeError("reset() before step()")
        if self.done:
            raise RuntimeError("episode is over; reset() to play again")
        try:
            state, _, _ = self._call(self._env.step, action)
        except Exception as error:  # the handcoded expert raises on its own internal timeout
            if "Timeout" not in str(error):
                raise
            self.expert_failed = True
            state = self._env.state
        self.steps += 1
        self.won = bool(state["won"])
        self.done = self.won or self.steps >= self.max_steps
        self.expert_plan = [] if self.expert_failed else self._expert(state)
        return {"observation": state["feedback"].strip(), "admissible_actions": list(state["admissible_commands"]),
                "won": self.won, "done": self.done, "steps": self.steps, "expert_plan": list(self.expert_plan)}

    def walkthrough(self) -> list[str]:
        """The planner's plan stored in the game file at generation time."""
        from .gamefiles import read_game
        return list(read_game(self.game).get("walkthrough") or []) if self.game else []

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
