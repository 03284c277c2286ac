"""What the CPU can do, for choices that depend on it (bf16 autocast in training)."""

from pathlib import Path


def cpu_has_bf16() -> bool:
    """bf16 matmuls are native only with AVX512-BF16 or AMX; elsewhere they are emulated (~10x slower)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags
