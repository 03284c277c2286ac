"""Output constraint: a regular expression every generation must match (vLLM structured outputs).

With `admissible` given, the `<action>` is exactly one admissible action or one of the
allowed harness verbs with a bracketed argument; without it, any short single-line text.
Only printable ASCII without `<` `>` is allowed inside think/arguments, so every
character is one byte and the number of tokens is bounded by the number of characters:
`max_tokens_for` returns that bound, and a constrained generation can never be cut off.
"""

from __future__ import annotations

import functools
import re

from service.policy.wire import (
    ACTION_CLOSE,
    ACTION_OPEN,
    ARG_MAX_CHARS,
    FREE_ACTION_MAX_CHARS,
    THINK_CLOSE,
    THINK_MAX_CHARS,
    THINK_OPEN,
)

# printable ASCII minus < and > : 0x20-0x3B, 0x3D, 0x3F-0x7E
TEXT_CLASS = "[ -;=?-~]"
TEXT_FIRST = "[!-;=?-~]"
# ... and minus [ \ ] for verb arguments, which start with a non-blank (never empty once stripped)
ARG_CLASS = "[ -;=?-Z^-~]"
ARG_FIRST = "[!-;=?-Z^-~]"
_SPECIAL = set("\\.^$|?*+()[]{}/")


def escape(text: str) -> str:
    """Escape a literal for the regex dialects of Python re, xgrammar and guidance."""
    return "".join("\\" + c if c in _SPECIAL else c for c in text)


_SAFE_ACTION = re.compile(TEXT_CLASS + "+")


def is_safe_action(text: str) -> bool:
    """Admissible actions must be printable ASCII without <, > and newlines."""
    return _SAFE_ACTION.fullmatch(text) is not None


def action_pattern(admissible: list[str] | None, verbs: list[str]) -> str:
    alts = []
    if admissible is not None:
        alts += [escape(a) for a in admissible]
    else:
        alts.append(f"{TEXT_FIRST}{TEXT_CLASS}{{0,{FREE_ACTION_MAX_CHARS - 1}}}")
    alts += [f"{v} \\[{ARG_FIRST}{ARG_CLASS}{{0,{ARG_MAX_CHARS - 1}}}\\]" for v in verbs]
    return "(" + "|".join(alts) + ")"


def response_regex(admissible: list[str] | None, verbs: list[str]) -> str:
    return _response_regex(None if admissible is None else tuple(admissible), tuple(verbs))


@functools.lru_cache(maxsize=1024)  # a step asks for the same (admissible, verbs) once per turn, and rooms repeat
def _response_regex(admissible: tuple[str, ...] | None, verbs: tuple[str, ...]) -> str:
    return (
        f"{escape(THINK_OPEN)}{TEXT_CLASS}{{0,{THINK_MAX_CHARS}}}{escape(THINK_CLOSE)}"
        f"{escape(ACTION_OPEN)}{action_pattern(None if admissible is None else list(admissible), list(verbs))}"
        f"{escape(ACTION_CLOSE)}"
    )


def max_tokens_for(admissible: list[str] | None, verbs: list[str]) -> int:
    longest = max([len(a) for a in admissible or []] + [0])
    if admissible is None:
        longest = FREE_ACTION_MAX_CHARS
    if verbs:
        longest = max(longest, max(len(v) for v in verbs) + 3 + ARG_MAX_CHARS)
    fixed = len(THINK_OPEN + THINK_CLOSE + ACTION_OPEN + ACTION_CLOSE)
    return fixed + THINK_MAX_CHARS + longest + 1  # +1 for the end-of-sequence token
