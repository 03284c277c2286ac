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
