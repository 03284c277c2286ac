"""The harness runtime: pure, JSON-serialisable state and operations.

Nothing here talks to Redis or to a model. The service drives it over Redis
(`service.store`), training drives the very same functions in memory.
"""

from service.harness.ops import (
    HarnessError,
    allowed_verbs,
    apply_env_action,
    apply_verb,
    effective_controls,
    observe,
)
from service.harness.state import MODES, MODULES, VERB_MODULE, VERBS, new_state

__all__ = [
    "MODES", "MODULES", "VERBS", "VERB_MODULE", "new_state",
    "HarnessError", "allowed_verbs", "apply_env_action", "apply_verb", "effective_controls", "observe",
]
