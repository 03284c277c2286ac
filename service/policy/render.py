"""The one prompt renderer. The service, the trainer and the evaluator all build prompts here.

A session's prompt is its **episode so far, as one growing chat**: a fixed system message, then the transcript
kept in the harness state (user turns: the task and each observation, or the result of a harness call; assistant
turns: each `<think>…</think><action>…</action>` the policy emitted), then the assistant header. Every message is
rendered once, when it is appended, and never changes afterwards, so

* the prompt of turn t+1 starts with the prompt of turn t plus its completion (`<|im_end|>\\n`): vLLM's prefix
  cache serves everything but the newest observation, and
* one training sequence (the last prompt of an episode plus its completion) holds every turn of the episode:
  a single forward/backward trains all of them (`training.sft`).

`prepare_turn` (service.policy.turns) asks `pending_messages` for the messages that the next turn adds (the newest
observation, with the panels of `always_on` mode), renders the prompt with `render_prompt`, and `apply_decision`
appends those messages, the response and any harness result with `append_turn`.

What a prompt omits on purpose: the admissible list for domains whose observations already name every possible
action (ALFWorld: receptacles in the first observation, objects where they are seen); the grammar enforces
admissibility anyway. The step counter (the policy does not need it to act).
"""

from __future__ import annotations

from service.harness.experience import format_entries
from service.harness.state import VERB_MODULE, VERBS
from service.policy.wire import chatml, format_response

VERB_HELP = {
    "track": "track [x] reads your belief about x",
    "commit": "commit [subgoal] records the subgoal you work on now",
    "recall": "recall [query] reads lessons from past episodes",
    "note": "note [insight] proposes a lesson for future episodes",
}

# Domains whose observations name every action the environment accepts: their prompts skip the admissible list.
ADMISSIBLE_IMPLIED = frozenset({"alfworld"})
# The transcript kept in state (and so the prompt) is bounded: past this many characters the oldest turns after the
# first message (the task) are dropped. ALFWorld text runs ~2.9 characters per SmolLM2 token (digits are tokens of
# their own), so 8,900 characters are ~3,100 tokens: a won ALFWorld episode stays below it.
MAX_TRANSCRIPT_CHARS = 8_900
CHARS_PER_TOKEN_FLOOR = 2.5   # fewer characters per token than any text we render, for the small tokenizers too
ANSWER_RESERVE_TOKENS = 512   # room left for the longest constrained answer


def transcript_chars_for(context_tokens: int) -> int:
    """The transcript bound for an engine with this context: MAX_TRANSCRIPT_CHARS, less for short contexts."""
    return max(1_000, min(MAX_TRANSCRIPT_CHARS, int(CHARS_PER_TOKEN_FLOOR * (context_tokens - ANSWER_RESERVE_TOKENS))))


def session_verbs(state: dict) -> list[str]:
    """The verbs the system message offers: fixed for a session by its mode and modules (the grammar narrows a turn
    further: per-step cap, operator controls, budget)."""
    if state["mode"] != "inline":
        return []
    return [v for v in VERBS if state["modules"][VERB_MODULE[v]]]


def system_message(state: dict) -> str:
    verbs = session_verbs(state)
    text = (
        "You act in a text environment to complete the task. Answer with "
        f"{format_response('short reasoning', 'one action')}. "
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


def observation_message(state: dict, experience_panel: list[dict] | None = None) -> str:
    """The user turn for the state's newest observation (the first one also carries the task)."""
    s = state
    lines = [] if s.get("transcript") else [f"Task: {s['task']}"]
    lines.append(s["observation"] or "")
    if s["mode"] == "always_on":
        if s["modules"]["progress"] and s["progress"]["subgoals"]:
            lines.append(f"Plan: {_progress(s['progress'])}")
        if s["modules"]["belief"]:
            lines.append(f"Belief: {belief_panel(s['belief'])}")
        if s["modules"]["experience"] and experience_panel and not s.get("transcript"):
            lines.append(f"Experience: {format_entries(experience_panel)}")
    if s["admissible"] is not None and s["domain"] not in ADMISSIBLE_IMPLIED:
        lines.append("Admissible: " + " | ".join(s["admissible"]))
    return "\n".join(lines)


def harness_result_message(verb: str, arg: str, result: str) -> str:
    return f"{verb} [{arg}] -> {result}"


def pending_messages(state: dict, experience_panel: list[dict] | None = None) -> list[dict]:
    """Messages the next turn adds before its response: the newest observation, if no turn has shown it yet."""
    if state.get("observation_shown", False) or state["observation"] is None:
        return []
    return [{"role": "user", "content": observation_message(state, experience_panel)}]


def render_messages(state: dict, pending: list[dict]) -> list[dict]:
    return [{"role": "system", "content": system_message(state)}, *state.get("transcript", []), *pending]


def render_prompt(state: dict, pending: list[dict]) -> str:
    return chatml(render_messages(state, pending))


def append_turn(state: dict, pending: list[dict], reason: str, action: str, result_text: str | None) -> dict:
    """A new state whose transcript holds `pending`, the response and (harness turns) the call's result."""
    msgs = [*state.get("transcript", []), *pending, {"role": "assistant", "content": format_response(reason, action)}]
    if result_text is not None:
        msgs.append({"role": "user", "content": result_text})
    limit = state.get("transcript_chars") or MAX_TRANSCRIPT_CHARS
    return {**state, "transcript": _bounded(msgs, limit), "observation_shown": True}


def _bounded(msgs: list[dict], limit: int) -> list[dict]:
    total = sum(len(m["content"]) for m in msgs)
    if total <= limit:
        return msgs
    keep = list(msgs)
    while len(keep) > 2 and total > limit:
        total -= len(keep.pop(1)["content"])  # oldest turn after the task
    return keep
