"""One episode: an environment for a policy, and one game played to the end.

Shared by the driver (``driver.play_games``, in process) and the process pool (``pool``, one per worker).
"""

from __future__ import annotations

import time
from pathlib import Path

from .env import AlfWorldEnv

USAGE_KEYS = ("harness_calls", "prompt_tokens", "completion_tokens")


def env_for(policy, cache: dict, max_steps: int) -> AlfWorldEnv:
    """An env with the expert the policy needs (if any), reused from ``cache``."""
    expert_type = getattr(policy, "expert_type", None)
    env = cache.get(expert_type)
    if env is None:
        env = cache[expert_type] = AlfWorldEnv(expert_type=expert_type, max_steps=max_steps)
    env.max_steps = max_steps
    return env


def play_episode(env: AlfWorldEnv, policy, game: Path, keep_transcript: bool = False) -> dict:
    """Play one game to the end (won or step budget); returns the episode record."""
    started = time.perf_counter()
    if hasattr(policy, "bind_env"):
        policy.bind_env(env)
    tick = time.perf_counter()
    state = env.reset(game)
    reset_seconds = time.perf_counter() - tick
    step_seconds = 0.0
    traj = env.traj_data
    policy.reset(state["task"], state["observation"], state["admissible_actions"])
    usage = dict.fromkeys(USAGE_KEYS, 0)
    transcript = []
    observation, admissible = state["observation"], state["admissible_actions"]
    while not state["done"]:
        action, info = policy.act(observation, admissible, state["won"], False)
        for key in USAGE_KEYS:
            usage[key] += int(info.get(key) or 0)
        tick = time.perf_counter()
        state = env.step(action)
        step_seconds += time.perf_counter() - tick
        observation, admissible = state["observation"], state["admissible_actions"]
        if keep_transcript:
            transcript.append({"action": action, "observation": observation})
    policy.act(observation, admissible, state["won"], True)
    record = {"game": Path(game).name, "task_type": traj.get("task_type", ""),
              "room": traj.get("scene", {}).get("scene_num"), "task": state.get("task") or "",
              "won": bool(state["won"]), "steps": env.steps, **usage,
              "seconds": round(time.perf_counter() - started, 3), "reset_seconds": round(reset_seconds, 3),
              "step_seconds": round(step_seconds, 3)}
    if keep_transcript:
        record["task"] = env.traj_data.get("turk_annotations", {}).get("anns", [{}])[0].get("task_desc", "")
        record["transcript"] = transcript
    return record
