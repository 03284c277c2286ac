"""RFC 6902 JSON Patch between two JSON documents, fast enough for the step path.

`diff(a, b)` returns a list of operations (`add`, `remove`, `replace`) that turns `a` into `b` when applied in
order (`jsonpatch.apply_patch(a, diff(a, b)) == b`, types included: `1`, `1.0` and `true` differ).

Built for the documents the service versions (harness states and Experience banks): nested objects whose lists
mostly grow at the end, shrink at the front (sliding windows such as `history`) or change in place. Objects are
compared key by key; lists are trimmed to the differing middle (common prefix and suffix), then a front shift
(remove k from the front, append k) is recognised, else elements are diffed index by index and the rest removed
or added. Unchanged subtrees that are the same Python object are skipped without a walk, so states built by
structural sharing (service.harness.ops) diff in time proportional to what changed.

Operation values are not copied: they reference `b`'s subtrees, so serialise the patch before mutating `b`.
"""

from __future__ import annotations

_MAX_SHIFT = 8  # front shifts tried on a list (a sliding window moves by one per step)


def diff(a, b) -> list[dict]:
    ops: list[dict] = []
    _diff(a, b, "", ops)
    return ops


def _esc(key) -> str:
    key = key if type(key) is str else str(key)
    if "~" in key or "/" in key:
        return key.replace("~", "~0").replace("/", "~1")
    return key


def equal(x, y) -> bool:
    """JSON equality: like ==, but a bool is not a number and an int is not a float."""
    if x is y:
        return True
    t = type(x)
    if t is not type(y):
        return False
    if t is str:
        return x == y
    if t is dict:
        if len(x) != len(y):
            return False
        for k, v in x.items():  # noqa: SIM110 - a plain loop: this runs on every committed step
            if k not in y or not equal(v, y[k]):
                return False
        return True
    if t is list:
        if len(x) != len(y):
            return False
        for u, v in zip(x, y):  # noqa: SIM110 - as above
            if not equal(u, v):
                return False
        return True
    return x == y


def _diff(a, b, path: str, ops: list) -> None:
    if a is b:
        return
    ta = type(a)
    if ta is not type(b):
        ops.append({"op": "replace", "path": path, "value": b})
    elif ta is dict:
        for k, va in a.items():
            if k in b:
                vb = b[k]
                if va is not vb:
                    _diff(va, vb, f"{path}/{_esc(k)}", ops)
            else:
                ops.append({"op": "remove", "path": f"{path}/{_esc(k)}"})
        for k, vb in b.items():
            if k not in a:
                ops.append({"op": "add", "path": f"{path}/{_esc(k)}", "value": vb})
    elif ta is list:
        _diff_list(a, b, path, ops)
    elif a != b:
        ops.append({"op": "replace", "path": path, "value": b})


def _diff_list(a: list, b: list, path: str, ops: list) -> None:
    na, nb = len(a), len(b)
    m = min(na, nb)
    i = 0
    while i < m and equal(a[i], b[i]):
        i += 1
    j = 0
    while j < m - i and equal(a[na - 1 - j], b[nb - 1 - j]):
        j += 1
    ea, eb = na - j, nb - j          # differing middles: a[i:ea] and b[i:eb]
    la, lb = ea - i, eb - i
    if la == 0 and lb == 0:
        return
    if la and lb:
        # a front shift: a's middle minus its first k elements starts b's middle, and b's middle goes on after it
        for k in range(1, min(la, _MAX_SHIFT) + 1):
            keep = la - k
            if keep <= 0 or keep > lb:
                break
            if all(equal(a[i + k + t], b[i + t]) for t in range(keep)):
                for _ in range(k):
                    ops.append({"op": "remove", "path": f"{path}/{i}"})
                for t in range(i + keep, eb):
                    ops.append({"op": "add", "path": f"{path}/{t}", "value": b[t]})
                return
    n = min(la, lb)
    for t in range(i, i + n):
        _diff(a[t], b[t], f"{path}/{t}", ops)
    for _ in range(la - n):
        ops.append({"op": "remove", "path": f"{path}/{i + n}"})
    for t in range(i + n, eb):
        ops.append({"op": "add", "path": f"{path}/{t}", "value": b[t]})
