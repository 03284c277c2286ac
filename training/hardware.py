"""What the CPU can do, for choices that depend on it: bf16 autocast in training.

Having the bf16 instructions is not enough. On an Intel host with AVX512-BF16 but no AMX (session 29), a full
forward+backward of SmolLM2-135M ran at 107 tokens/s under bf16 autocast and 145 tokens/s in fp32, while on AMX hosts
autocast is the faster one. So the trainer times one matmul at the model's shapes in both dtypes and autocasts only
where bf16 wins.
"""

from __future__ import annotations

import functools
import time

from service.hardware import cpu_has_bf16

__all__ = ["cpu_has_bf16", "bf16_autocast_pays", "time_matmuls"]


def time_matmuls(rows: int = 1024, hidden: int = 576, out: int = 1536, reps: int = 8) -> tuple[float, float]:
    """Seconds for ``reps`` (rows x hidden) @ (hidden x out) matmuls in fp32 and in bf16 (SmolLM2-135M's MLP)."""
    import torch

    seconds = []
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(rows, hidden, dtype=dtype), torch.randn(hidden, out, dtype=dtype)
        a @ b                                       # first call: kernel selection
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        seconds.append(time.perf_counter() - t)
    return seconds[0], seconds[1]


@functools.cache
def bf16_autocast_pays(margin: float = 1.1, cpuinfo: str | None = None, measure=time_matmuls) -> bool:
    """True where the CPU has bf16 instructions and a bf16 matmul beats fp32 by ``margin``."""
    if not cpu_has_bf16(cpuinfo):
        return False
    fp32_s, bf16_s = measure()
    return fp32_s > margin * bf16_s
