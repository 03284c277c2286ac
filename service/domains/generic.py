"""The generic domain: for any text environment.

Perception keeps the most recent distinct observation lines as free-text facts;
`track [x]` returns the facts that mention x. No task types, no progress events.
"""

from __future__ import annotations

MAX_FACTS = 24


class GenericDomain:
    name = "generic"

    def initial_belief(self, task: str, observation: str | None = None) -> dict:
        return {"location": None, "holding": [], "entities": {}, "task_type": None, "facts": []}

    def perceive(self, belief: dict, observation: str, action: str | None) -> dict:
        facts = list(belief.get("facts", []))
        for line in (ln.strip() for ln in observation.splitlines()):
            if line and line not in facts:
                facts.append(line)
        return {**belief, "facts": facts[-MAX_FACTS:]}

    def track(self, belief: dict, query: str) -> str:
        q = query.strip().lower()
        ents = belief.get("entities", {})
        if q in ents:
            return f"{q}: {ents[q]}"
        hits = [f for f in belief.get("facts", []) if q and q in f.lower()]
        return " | ".join(hits[-3:]) if hits else f"no belief about {query.strip()}"

    def task_type(self, task: str) -> str | None:
        return None

    def progress_events(self, belief: dict, observation: str, action: str | None) -> list[str]:
        return []
