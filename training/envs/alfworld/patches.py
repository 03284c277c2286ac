"""All changes this project makes to alfworld 0.4.2 / textworld 1.7.0 at run time, in one place.

Each patch is applied in memory by :func:`apply` (idempotent) and can be switched off again with :func:`disabled`
(used by the tests that prove each fix is needed). Nothing on disk is modified.

``expert_type``
    Upstream bug: ``AlfredTWEnv.init_env`` builds ``AlfredExpert(expert_type)``; the first positional parameter of
    ``AlfredExpert`` is ``env``, so the configured type lands there and every env gets the default ``handcoded``
    expert. The patch makes the ``AlfredExpert`` name that ``init_env`` looks up accept the type positionally.

``handcoded_move``
    Upstream bug: the handcoded expert tracks its inventory by looking for ``put`` in the last command, but the
    TextWorld grammar's command for placing is ``move X to Y``. After placing an object it still believes it
    holds it, so pick-two tasks (and any discard of a wrong object) loop until the step budget runs out. The patch
    shows the expert's state tracker ``put X in/on Y`` whenever the last command was ``move X to Y``.

``memoize_templates``
    Speed-up, not a bug: TextWorld's PDDL text generator re-parses every template string with a TatSu parser each
    time it derives text (every admissible command, every feedback, every step). The parse depends only on the
    string, so the patch caches the parsed symbols and hands out deep copies (the derivation mutates them); the
    same for the conditions (``Rule.parse_conjunctive_query``) the grammar queries the state with.
    Transcripts stay byte-identical (tested); a step costs roughly half as much.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import re

from .paths import ensure_alfworld_home

PATCHES = ("expert_type", "handcoded_move", "memoize_templates")
_originals: dict[str, list[tuple[object, str, object]]] = {}   # patch -> [(owner, attribute, original value)]
_MOVE = re.compile(r"^move (?P<obj>.+?) to (?P<recep>.+)$")


def move_as_put(command: str) -> str:
    """``move apple 1 to countertop 2`` -> ``put apple 1 in/on countertop 2``; other commands unchanged."""
    match = _MOVE.match(command.strip())
    return f"put {match['obj']} in/on {match['recep']}" if match else command


def _patch_expert_type():
    from alfworld.agents.environment import alfred_tw_env

    original = alfred_tw_env.AlfredExpert

    class PositionalTypeAlfredExpert(original):
        """``AlfredExpert`` that also accepts the expert type as its first positional argument."""

        def __init__(self, env=None, expert_type=alfred_tw_env.AlfredExpertType.HANDCODED):
            if isinstance(env, str):
                env, expert_type = None, env
            super().__init__(env=env, expert_type=expert_type)

    return [(alfred_tw_env, "AlfredExpert", PositionalTypeAlfredExpert)]


def _patch_handcoded_move():
    from alfworld.agents.expert.handcoded_expert import BasePolicy

    original = BasePolicy.update_state_tracking

    @functools.wraps(original)
    def update_state_tracking(self, game_state, last_action):
        return original(self, game_state, move_as_put(last_action))

    return [(BasePolicy, "update_state_tracking", update_state_tracking)]


def _patch_memoize_templates():
    from textworld.envs.pddl import textgen
    from textworld.logic import Rule

    original = textgen._parse_and_convert
    original_query = Rule.parse_conjunctive_query  # bound classmethod

    @functools.lru_cache(maxsize=4096)
    def parsed(text, rule_name, trace):
        return original(text, rule_name=rule_name, trace=trace)

    def parse_and_convert(text, rule_name="start", trace=False, **kwargs):
        if kwargs or not isinstance(text, str):
            return original(text, rule_name=rule_name, trace=trace, **kwargs)
        return copy.deepcopy(parsed(text, rule_name, bool(trace)))

    @functools.lru_cache(maxsize=4096)
    def parsed_query(expression):
        return original_query(expression)

    def parse_conjunctive_query(expression):
        return copy.deepcopy(parsed_query(expression))

    # Rule.parse_conjunctive_query is a classmethod; a staticmethod of the same signature replaces it.
    return [(textgen, "_parse_and_convert", parse_and_convert),
            (Rule, "parse_conjunctive_query", staticmethod(parse_conjunctive_query))]


_BUILDERS = {"expert_type": _patch_expert_type, "handcoded_move": _patch_handcoded_move,
             "memoize_templates": _patch_memoize_templates}


def apply(*names: str) -> None:
    """Apply the named patches (all by default). Safe to call many times."""
    ensure_alfworld_home()
    for name in names or PATCHES:
        if name in _originals:
            continue
        changes = _BUILDERS[name]()
        _originals[name] = [(owner, attribute, owner.__dict__[attribute]) for owner, attribute, _ in changes]
        for owner, attribute, replacement in changes:
            setattr(owner, attribute, replacement)


def revert(*names: str) -> None:
    for name in names or PATCHES:
        for owner, attribute, original in _originals.pop(name, []):
            setattr(owner, attribute, original)


def applied() -> list[str]:
    return [name for name in PATCHES if name in _originals]


@contextlib.contextmanager
def disabled(*names: str):
    """Run a block with the named patches (all by default) reverted, restoring them afterwards."""
    names = names or PATCHES
    was = [n for n in names if n in _originals]
    revert(*names)
    try:
        yield
    finally:
        apply(*was) if was else None
