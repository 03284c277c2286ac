"""/ui/sessions/{id}: the audit timeline as one server-rendered HTML page (no build step, no external assets).

One row per committed event: version, kind, reason, verb or action, result, tokens and the event's JSON Patch
(add green, remove red, replace yellow). Each version links to `?version=k`, which shows the state at k
(time travel) and dims the events after it.
"""

from __future__ import annotations

import json
from html import escape
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from service.api.deps import CanAudit, SessionsDep

router = APIRouter(prefix="/ui", tags=["ui"], include_in_schema=False)

MAX_EVENTS = 5000

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.2em;color:#222;background:#fafafa}
h1{font-size:1.3em;margin:0 0 .2em} .meta{color:#555;margin-bottom:.8em}
table{border-collapse:collapse;width:100%;background:#fff;table-layout:fixed} th,td{overflow-wrap:anywhere;border-bottom:1px solid #e3e3e3;padding:4px 6px;
vertical-align:top;text-align:left} th{background:#f0f0f0;position:sticky;top:0}
tr.later{opacity:.35} tr.at{outline:2px solid #3b82f6} .kind{font-weight:600}
.k-observe{color:#666}.k-harness{color:#7c3aed}.k-env{color:#0369a1}.k-control{color:#b45309}.k-end{color:#111}
ul.patch{list-style:none;margin:0;padding:0;font:12px/1.3 ui-monospace,monospace}
ul.patch li{padding:1px 4px;margin:1px 0;border-radius:3px;white-space:pre-wrap;word-break:break-all}
.op-add{background:#dcfce7;color:#14532d}.op-remove{background:#fee2e2;color:#7f1d1d}
.op-replace{background:#fef9c3;color:#713f12}.op-move,.op-copy,.op-test{background:#e5e7eb}
pre.state{background:#fff;border:1px solid #ddd;padding:8px;max-height:28em;overflow:auto;font-size:12px}
.res{max-width:28em;white-space:pre-wrap} .tok{white-space:nowrap;font-variant-numeric:tabular-nums}
.bar{margin:.6em 0} .bar label{margin-right:1em}
"""

JS = """
const rows=[...document.querySelectorAll('#timeline tbody tr')];
function apply(){const hide=document.getElementById('hide-observe').checked;
 const q=document.getElementById('q').value.toLowerCase();let shown=0;
 for(const r of rows){const ok=!(hide&&r.dataset.kind==='observe')&&(!q||r.textContent.toLowerCase().includes(q));
  r.style.display=ok?'':'none';shown+=ok;}
 document.getElementById('shown').textContent=shown+' of '+rows.length+' events shown';}
document.getElementById('hide-observe').addEventListener('change',apply);
document.getElementById('q').addEventListener('input',apply);
apply();document.body.dataset.ready='1';
"""


def _short(value, n: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= n else text[: n - 1] + "…"


SHOWN_OPS = 8


def _patch_html(ops: list[dict]) -> str:
    items = []
    for op in ops or []:
        kind = op.get("op", "?")
        where = op.get("path", "")
        if kind in ("move", "copy"):
            where = f"{op.get('from', '')} → {where}"
        val = f" = {_short(op['value'], 120)}" if "value" in op else ""
        items.append(f'<li class="op op-{escape(kind)}">{escape(kind)} {escape(where)}{escape(val)}</li>')
    if len(items) <= SHOWN_OPS:
        return f'<ul class="patch">{"".join(items)}</ul>' if items else ""
    rest = "".join(items[SHOWN_OPS:])
    return (f'<ul class="patch">{"".join(items[:SHOWN_OPS])}</ul><details><summary>{len(items) - SHOWN_OPS} more '
            f'operations</summary><ul class="patch">{rest}</ul></details>')


def _what(ev: dict) -> str:
    if ev["kind"] == "env":
        return f"<b>action</b> {escape(ev.get('arg') or '')}"
    if ev["kind"] == "harness":
        arg = f" [{escape(ev['arg'])}]" if ev.get("arg") else ""
        return f"<b>{escape(ev.get('verb') or '')}</b>{arg}"
    return escape(_short(ev.get("arg") or "", 80))


def _row(ev: dict, at: int | None) -> str:
    v = ev["version"]
    cls = "later" if at is not None and v > at else ("at" if v == at else "")
    usage = ev.get("usage") or {}
    tokens = (f'{usage.get("prompt_tokens", 0)} + {usage.get("completion_tokens", 0)}'
              if usage.get("prompt_tokens") is not None else "")
    result = "" if ev.get("result") is None else _short(ev["result"], 300)
    return (f'<tr id="v{v}" class="{cls}" data-kind="{escape(ev["kind"])}">'
            f'<td><a href="?version={v}">{v}</a></td>'
            f'<td class="kind k-{escape(ev["kind"])}">{escape(ev["kind"])}</td>'
            f'<td>{escape(_short(ev.get("reason") or "", 300))}</td><td>{_what(ev)}</td>'
            f'<td class="res">{escape(result)}</td><td class="tok">{tokens}</td>'
            f'<td>{_patch_html(ev.get("patch"))}</td></tr>')


def render(sid: str, current: dict, events: list[dict], at: int | None, state_at: dict | None) -> str:
    st = current["state"]
    harness = sum(e["kind"] == "harness" for e in events)
    tokens = sum((e.get("usage") or {}).get("prompt_tokens", 0) + (e.get("usage") or {}).get("completion_tokens", 0)
                 for e in events)
    travel = ""
    if state_at is not None:
        travel = (f'<h2>State at version {at} <small><a href="?">(back to latest)</a></small></h2>'
                  f'<pre class="state" id="state">{escape(json.dumps(state_at, indent=1, ensure_ascii=False))}</pre>')
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Audit {escape(sid)}</title>
<style>{CSS}</style></head><body>
<h1>Session {escape(sid)}</h1>
<div class="meta" id="summary">task: <b>{escape(st.get("task", ""))}</b> · mode {escape(str(st.get("mode")))}
 · status <b>{escape(str(st.get("status")))}</b> · version {current["version"]} · {len(events)} events ·
 {harness} harness calls · {tokens} tokens</div>
{travel}
<div class="bar"><label><input type="checkbox" id="hide-observe"> hide observe events</label>
<label>filter <input id="q" size="24"></label><span id="shown"></span></div>
<table id="timeline"><colgroup><col style="width:3em"><col style="width:5.5em"><col style="width:16%">
<col style="width:13%"><col style="width:18%"><col style="width:7em"><col></colgroup><thead><tr><th>v</th><th>kind</th><th>reason</th><th>verb / action</th><th>result</th>
<th title="prompt + completion tokens">tokens</th><th>state diff (JSON Patch)</th></tr></thead>
<tbody>{"".join(_row(e, at) for e in events)}</tbody></table>
<script>{JS}</script></body></html>"""


@router.get("/sessions/{session_id}", response_class=HTMLResponse, summary="Audit timeline of a session")
async def timeline(session_id: str, sessions: SessionsDep, who: CanAudit,
                   version: Annotated[int | None, Query(ge=0)] = None):
    current = await sessions.state(session_id, None, who.tenant)  # 404 (problem+json) if unknown
    events, after = [], 0
    while len(events) < MAX_EVENTS:
        page = await sessions.audit(session_id, after, 1000, who.tenant)
        events += page["events"]
        if page["next"] is None:
            break
        after = page["next"]
    state_at = None
    if version is not None:
        state_at = (await sessions.state(session_id, version, who.tenant))["state"]  # 404 past the end
    return HTMLResponse(render(session_id, current, events, version, state_at))
