"""JSON for what the store writes to Redis and reads back: compact UTF-8 bytes by orjson (faster than the json
module on a step's state and events: docs/benchmarks.md), with the json module where orjson refuses a value.

`dumps` falls back to `json.dumps` (compact, ASCII) for what orjson will not write: strings with lone
surrogates, integers beyond 64 bits, dict keys that are not strings. `loads` falls back to `json.loads` for what
orjson will not read (the same cases, and `NaN`/`Infinity` that older versions of this store could write).
So the stored JSON means the same as before; only its bytes differ: non-ASCII text is written as UTF-8 rather
than `\\uXXXX` escapes (fewer bytes), and a non-finite float is written as `null`.
"""

from __future__ import annotations

import json

import orjson


def dumps(value) -> bytes:
    """Compact JSON, UTF-8."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, separators=(",", ":")).encode()  # ASCII: lone surrogates as \\uXXXX escapes


def loads(raw: bytes | str):
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # a ValueError
        return json.loads(raw)
