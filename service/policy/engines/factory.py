"""make_engine(kind, **options): the one place that maps a configured engine kind to a class."""

from __future__ import annotations

from service.policy.engines.base import Engine

KINDS = ("vllm", "remote", "scripted")


def make_engine(kind: str, **options) -> Engine:
    """Build an engine (not started; call ``await engine.start()``).

    kind "vllm"     -> VLLMEngine(model, adapter=, max_model_len=, kv_cache_gib=, enforce_eager=, seed=, ...)
    kind "remote"   -> RemoteVLLMEngine(urls, model=, adapter=, timeout_s=, policy=, ...)
    kind "scripted" -> ScriptedEngine(responses | responder=, ...)   (tests / overhead benchmark only)

    Options whose value is None are dropped, so a Settings object can pass every field through.
    Imports are lazy: "remote" and "scripted" never import vLLM.
    """
    opts = {k: v for k, v in options.items() if v is not None}
    kind = (kind or "").strip().lower()
    if kind in ("vllm", "local", "vllm_local"):
        from service.policy.engines.vllm_local import VLLMEngine

        if "model" not in opts:
            raise ValueError("engine 'vllm' needs model=<path>")
        return VLLMEngine(opts.pop("model"), **opts)
    if kind in ("remote", "vllm_remote", "openai"):
        from service.policy.engines.vllm_remote import RemoteVLLMEngine

        urls = opts.pop("urls", None) or opts.pop("url", None)
        if not urls:
            raise ValueError("engine 'remote' needs urls=[...] (or a comma-separated string)")
        return RemoteVLLMEngine(urls, **opts)
    if kind == "scripted":
        from service.policy.engines.scripted import ScriptedEngine

        return ScriptedEngine(opts.pop("responses", None), **opts)
    raise ValueError(f"unknown engine kind {kind!r}; expected one of {KINDS}")
