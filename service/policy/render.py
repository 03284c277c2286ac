"""The one prompt renderer. The service, the trainer and the evaluator all build prompts here.

`render_messages(view)` gives chat messages; `render_prompt(view)` gives the exact
ChatML text sent to the engine (and used as the SFT/GRPO prompt), so a model sees
byte-identical prompts in training and in serving.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from service.harness.experience import format_entries

VERB_HELP = {
    "track": "track [x] reads your belief about x",
    "commit": "commit [subgoal] records the subgoal you work on now",
    "recall": "recall [query] reads lessons from past episodes",
    "note": "note [insight] proposes a lesson for future episodes",
}


@dataclass(frozen=True)
class PromptView:
    """What the renderer needs from a harness state (built by `view_of`)."""

    state: dict
    verbs: list[str]
    experience_panel: list[dict] = field(default_factory=list)  # always_on mode only


def view_of(state: dict, verbs: list[str], experience_panel: list[dict] | None = None) -> PromptView:
    return PromptView(state=state, verbs=list(verbs), experience_panel=list(experience_panel or []))


def _system(verbs: list[str]) -> str:
    text = (
        "You act in a text environment to complete the task. Answer with "
        "<think>short reasoning</think><action>one action</action>. "
        "The action is one admissible action"
    )
    if verbs:
        text += " or one harness call: " + "; ".join(VERB_HELP[v] for v in verbs)
        text += ". A harness call spends a step, so call only when it helps"
    return text + "."


def belief_panel(belief: dict, limit: int = 8) -> str:
    parts = []
    if belief.get("location"):
        parts.append(f"at {belief['location']}")
    if belief.get("holding"):
        parts.append("holding " + ", ".join(belief["holding"]))
    objs = [
        (n, e) for n, e in belief.get("entities", {}).items() if e.get("kind") == "object" and e.get("at")
    ][-limit:]
    parts += [f"{n} {e.get('rel', 'at')} {e['at']}" for n, e in objs]
    return "; ".join(parts) if parts else "nothing known yet"


def _progress(progress: dict) -> str:
    return "; ".join(f"[{g['status']}] {g['text']}" for g in progress["subgoals"])


def render_user(view: PromptView) -> str:
    s = view.state
    lines = [f"Task: {s['task']}"]
    b = s["budget"]
    lines.append(f"Step: {b['used'] + 1}" + (f" of {b['max_steps']}" if b["max_steps"] else ""))
    if s["history"]:
        lines.append("Recent:")
        for h in s["history"][:-1]:
            lines.append(f"> {h['action']}\n{h['observation']}")
        lines.append(f"> {s['history'][-1]['action']}")
    lines.append(f"Observation: {s['observation'] or ''}")
    show_panels = s["mode"] != "env_only"
    if show_panels and s["modules"]["progress"] and s["progress"]["subgoals"]:
        lines.append(f"Plan: {_progress(s['progress'])}")
    if s["mode"] == "always_on":
        if s["modules"]["belief"]:
            lines.append(f"Belief: {belief_panel(s['belief'])}")
        if s["modules"]["experience"] and view.experience_panel:
            lines.append(f"Experience: {format_entries(view.experience_panel)}")
    if s["step_harness_calls"] and s["last_result"]:
        r = s["last_result"]
        lines.append(f"Harness: {r['verb']} [{r['arg']}] -> {r['result']}")
    if s["admissible"] is not None:
        lines.append("Admissible: " + " | ".join(s["admissible"]))
    return "\n".join(lines)


def render_messages(view: PromptView) -> list[dict]:
    return [
        {"role": "system", "content": _system(view.verbs)},
        {"role": "user", "content": render_user(view)},
    ]


def chatml(messages: list[dict], add_generation_prompt: bool = True) -> str:
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def render_prompt(view: PromptView) -> str:
    return chatml(render_messages(view))
