"""Just enough PromQL reading for the deploy tests: the metric names and the label names an expression uses."""

from __future__ import annotations

import re

NOT_METRICS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
               "offset", "inf", "nan"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")


def metric_names(expr: str) -> set[str]:
    e = _STRING.sub('""', expr)                                  # strings
    e = re.sub(r"\{[^}]*\}", "", e)                              # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                             # ranges
    e = re.sub(r"\boffset\s+\w+", "", e)                         # offsets (1h is no metric)
    e = _GROUPING.sub("", e)                                     # grouping labels
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        rest = e[m.end():].lstrip()
        if rest.startswith("(") or m.group(0).lower() in NOT_METRICS:
            continue                                              # a function or a keyword
        names.add(m.group(0))
    return names


def label_names(expr: str) -> set[str]:
    """Labels named in matchers ({part="total"}) and in by/without/on/ignoring/group_x lists."""
    e = _STRING.sub('""', expr)
    used = set()
    for m in re.finditer(r"\{([^}]*)\}", e):
        used |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", m.group(1)))
    for m in _GROUPING.finditer(e):
        used |= set(re.findall(r"[A-Za-z_]\w*", m.group(2)))
    return used
