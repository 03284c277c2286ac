"""Generation engines behind one protocol (see `base.Engine`)."""

from service.policy.engines.base import Engine, Generation, GenerationRequest

__all__ = ["Engine", "Generation", "GenerationRequest"]
