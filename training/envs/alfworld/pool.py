"""A process pool that plays episodes in parallel, one ALFWorld environment per worker process.

TextWorld's engine is single-threaded Python, so parallel rollouts need processes. Each worker keeps its
environments (one per expert type) for all the episodes it plays; the policy is pickled with each job.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from .episode import env_for, play_episode

_ENVS: dict = {}
_MAX_STEPS = 50


def _init(max_steps: int) -> None:
    global _MAX_STEPS
    _MAX_STEPS = max_steps


def _play(job: tuple[str, object, bool]) -> dict:
    game, policy, keep_transcript = job
    env = env_for(policy, _ENVS, _MAX_STEPS)
    return play_episode(env, policy, Path(game), keep_transcript=keep_transcript)


class EpisodePool:
    """``with EpisodePool(workers=2, max_steps=50) as pool: results = pool.play(games, policy)``"""

    def __init__(self, workers: int = 2, max_steps: int = 50, context: str = "fork"):
        self.workers = workers
        self._pool = multiprocessing.get_context(context).Pool(workers, initializer=_init, initargs=(max_steps,))

    def play(self, games, policy, keep_transcript: bool = False, on_result=None) -> list[dict]:
        """Play every game once; results in the order of ``games``."""
        jobs = [(str(g), policy, keep_transcript) for g in games]
        results = []
        for result in self._pool.imap(_play, jobs):
            results.append(result)
            if on_result:
                on_result(result)
        return results

    def close(self) -> None:
        self._pool.close()
        self._pool.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is not None:
            self._pool.terminate()
        self.close()
