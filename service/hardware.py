"""What this machine's CPU computes natively, for choices that depend on it (serving dtype, bf16 autocast)."""

from __future__ import annotations

from pathlib import Path

AUTO_CPU = "auto-cpu"


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """bf16 matmuls are native only with AVX512-BF16 or AMX; elsewhere they are emulated (~2x slower to serve a
    135M model, ~10x slower to train one)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = set(cpuinfo.split())
    return "avx512_bf16" in flags or "amx_bf16" in flags


def serving_dtype(requested: str, on_cpu: bool = True, cpuinfo: str | None = None) -> str:
    """The dtype to hand vLLM. ``auto-cpu`` (ours, not vLLM's) is bfloat16 where the CPU has bf16 instructions and
    float32 where it has not; on an accelerator it is vLLM's own ``auto``. Any other value passes through."""
    if requested != AUTO_CPU:
        return requested
    if not on_cpu:
        return "auto"
    return "bfloat16" if cpu_has_bf16(cpuinfo) else "float32"


def engine_thread_env(environ: dict, cpus: list[int]) -> dict[str, str]:
    """OpenMP settings for the in-process vLLM-CPU engine of ``evoharness serve`` when the environment gives none.

    On a box of at most 4 allowed CPUs the engine gets one OpenMP thread per CPU, bound to them. vLLM's own ``auto``
    binding keeps one CPU back for the front end, which on a 2-CPU box halves the engine: there, 16 sessions of the
    default policy ran 1.35 steps/s bound to both CPUs against 0.85 with auto's one (docs/benchmarks.md (j)). On
    larger boxes vLLM's auto binding stays. An explicit ``OMP_NUM_THREADS`` or ``VLLM_CPU_OMP_THREADS_BIND`` wins
    (tests and the Docker image set ``OMP_NUM_THREADS=1``: a container's CPU quota is not its affinity mask)."""
    if "OMP_NUM_THREADS" in environ or "VLLM_CPU_OMP_THREADS_BIND" in environ:
        return {}
    if 0 < len(cpus) <= 4:
        return {"OMP_NUM_THREADS": str(len(cpus)), "VLLM_CPU_OMP_THREADS_BIND": ",".join(str(c) for c in cpus)}
    return {"OMP_NUM_THREADS": "1"}
