"""The wire format shared by renderer, grammar and parser: `<think>…</think><action>…</action>`."""

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ACTION_OPEN, ACTION_CLOSE = "<action>", "</action>"

THINK_MAX_CHARS = 96      # reasoning is short by construction
ARG_MAX_CHARS = 48        # argument of a harness verb
FREE_ACTION_MAX_CHARS = 120  # env action when the client sends no admissible list


def format_response(reason: str, action: str) -> str:
    """The exact text a policy must emit (teacher data is written with this)."""
    return f"{THINK_OPEN}{reason}{THINK_CLOSE}{ACTION_OPEN}{action}{ACTION_CLOSE}"


def format_verb(verb: str, arg: str) -> str:
    return f"{verb} [{arg}]"

# ChatML, the chat wire of every model we serve (SmolLM2 and Qwen3 templates alike)
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
