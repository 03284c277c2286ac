"""ALFWorld offline: game generator, seen/unseen splits, environment wrapper, experts and the episode driver.

Modules (alfworld/textworld are imported lazily, inside the functions that need them):

* ``rooms``, ``tasks``, ``scene``, ``problem``, ``gamefiles`` - from alfworld's floor plans to a game folder
* ``generate`` - ``python -m training.envs.alfworld.generate --split valid_unseen``
* ``splits`` - train / valid_seen / valid_unseen / fixtures
* ``env`` - :class:`AlfWorldEnv` on the real TextWorld engine with alfworld's wrappers
* ``patches`` - the two upstream bug fixes and the template memoisation, in one place
* ``driver``, ``policies``, ``episode``, ``pool`` - play games against a policy (expert, callable, HTTP service),
  one episode at a time or on a process pool, and report

See docs/alfworld.md.
"""
