"""The domain protocol.

A domain is pure and storage-agnostic: every method takes JSON-serialisable
data and returns new JSON-serialisable data (it never mutates its inputs).

Belief layout shared by all domains (extra keys are allowed per domain)::

    {
      "location": "countertop 1" | None,      # where the agent is
      "holding": ["apple 1"],                 # objects the agent carries
      "entities": {                           # everything seen so far
        "apple 1": {"kind": "object", "at": "countertop 1", "rel": "on",
                     "attrs": {"cooled": True}},
        "fridge 1": {"kind": "receptacle", "attrs": {"open": False, "visited": True}},
      },
      "task_type": "pick_cool_then_place_in_recep" | None,
      "facts": ["free-text facts (generic domain)"],
    }

`rel` is one of "in", "on", "held" (then `at` is None). Attributes used by the
ALFWorld domain: open, visited, cooled, heated, cleaned, sliced, toggled.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Domain(Protocol):
    name: str

    def initial_belief(self, task: str, observation: str | None = None) -> dict:
        """Belief before the first step; `observation` is the first observation if known."""

    def perceive(self, belief: dict, observation: str, action: str | None) -> dict:
        """Return the Belief after `action` (None on the first step) produced `observation`."""

    def track(self, belief: dict, query: str) -> str:
        """Answer `track [query]` from Belief as short text (e.g. 'kettle 2 @ stoveburner 3')."""

    def task_type(self, task: str) -> str | None:
        """Task type detected from the task text, or None."""

    def progress_events(self, belief: dict, observation: str, action: str | None) -> list[str]:
        """Subgoal texts that perception marks complete after this action (may be empty)."""

