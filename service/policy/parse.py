"""The one response parser. Every policy output - served, trained on or evaluated - goes through `parse`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.harness.state import VERBS
from service.policy.wire import ACTION_CLOSE, ACTION_OPEN, THINK_CLOSE, THINK_OPEN, format_response

_RESPONSE = re.compile(rf"\s*{re.escape(THINK_OPEN)}(?P<think>.*?){re.escape(THINK_CLOSE)}"
                       rf"\s*{re.escape(ACTION_OPEN)}(?P<action>.*?){re.escape(ACTION_CLOSE)}\s*", re.DOTALL)
_VERB = re.compile(r"(?P<verb>" + "|".join(VERBS) + r")\s*\[(?P<arg>.*)\]", re.DOTALL)


class ParseError(ValueError):
    """The response is not well formed, or names an action that is not allowed."""


@dataclass(frozen=True)
class Decision:
    kind: str            # "harness" or "env"
    reason: str
    action: str          # the env action (kind env) or the verb call text (kind harness)
    verb: str | None = None
    arg: str | None = None


def parse(text: str, admissible: list[str] | None, verbs: list[str]) -> Decision:
    """Read `<think>…</think><action>…</action>`.

    A harness verb must be in `verbs` (the verbs allowed this turn); an environment
    action must be in `admissible` when that list is given. A verb-shaped text whose verb
    is not allowed is an environment action if the environment accepts free text.
    """
    m = _RESPONSE.fullmatch(text)
    if m is None:
        raise ParseError(f"response is not {format_response('…', '…')}")
    reason, action = m["think"].strip(), m["action"].strip()
    if not action:
        raise ParseError("empty action")
    vm = _VERB.fullmatch(action)
    if vm is not None and vm["verb"] in verbs:
        if not vm["arg"].strip():
            raise ParseError(f"harness verb {vm['verb']!r} needs an argument")
        return Decision("harness", reason, action, vm["verb"], vm["arg"].strip())
    if vm is not None and admissible is not None and action not in admissible:
        raise ParseError(f"harness verb {vm['verb']!r} is not allowed now (allowed: {verbs})")
    if admissible is not None and action not in admissible:
        raise ParseError(f"action {action!r} is not admissible")
    return Decision("env", reason, action)
