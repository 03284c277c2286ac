"""What the CPU can do, for choices that depend on it (bf16 autocast in training): the service's check."""

from service.hardware import cpu_has_bf16

__all__ = ["cpu_has_bf16"]
