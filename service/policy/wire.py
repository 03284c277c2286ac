"""The wire format, all of it: the ChatML chat the prompts are written in (`<|im_start|>`/`<|im_end|>`, `chatml`)
and the response a policy emits (`<think>…</think><action>…</action>`). The renderer, grammar, parser, the tiny
model's tokenizer and the training code take every tag from here."""

# ChatML, the chat wire of every model we serve (SmolLM2 and Qwen3 templates alike)
IM_START, IM_END = "<|im_start|>", "<|im_end|>"

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ACTION_OPEN, ACTION_CLOSE = "<action>", "</action>"

THINK_MAX_CHARS = 96      # reasoning is short by construction
ARG_MAX_CHARS = 48        # argument of a harness verb
FREE_ACTION_MAX_CHARS = 120  # env action when the client sends no admissible list


def chatml(messages: list[dict], add_generation_prompt: bool = True) -> str:
    """Messages ({"role", "content"}) as ChatML text; with `add_generation_prompt`, the assistant header follows."""
    out = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return out + (f"{IM_START}assistant\n" if add_generation_prompt else "")


def format_response(reason: str, action: str) -> str:
    """The exact text a policy must emit (teacher data is written with this)."""
    return f"{THINK_OPEN}{reason}{THINK_CLOSE}{ACTION_OPEN}{action}{ACTION_CLOSE}"


def format_verb(verb: str, arg: str) -> str:
    return f"{verb} [{arg}]"
