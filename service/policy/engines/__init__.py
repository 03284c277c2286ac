"""Generation engines behind one protocol (see `base.Engine`); build them with `factory.make_engine`."""

from service.policy.engines.base import Engine, EngineError, EngineTimeout, Generation, GenerationRequest
from service.policy.engines.factory import make_engine

__all__ = ["Engine", "EngineError", "EngineTimeout", "Generation", "GenerationRequest", "make_engine"]
