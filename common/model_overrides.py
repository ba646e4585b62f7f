"""What a run, or its assistant, may change about the lead agent's model.

Beside `model_name` (one of the configured models), its `context` (or
`config.configurable`) may carry `reasoning_effort` and `model_params`, a few
sampling parameters. Nothing else: an endpoint, a key or a header stays the
config's, so that a caller can never send the provider's key somewhere else.
Admission refuses anything outside these rules (400) before the run exists;
the runner applies them (services/runner/graphs/chat_models.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")
# The sampling parameters a run may set, and the type each must have.
OVERRIDABLE_PARAMS: dict[str, type] = {"temperature": float, "top_p": float, "max_tokens": int}


class ModelOverrideError(ValueError):
    """A run's model overrides break the rules above; the message says which."""


@dataclass(frozen=True)
class ModelOverrides:
    reasoning_effort: str | None = None
    params: dict[str, Any] = field(default_factory=dict)


def _value(where: dict[str, Any], fallback: dict[str, Any], key: str) -> Any:
    value = where.get(key)
    return fallback.get(key) if value is None else value


def model_overrides(context: Any, configurable: Any) -> ModelOverrides:
    """The overrides of a run's `context` (first) or `configurable`, checked."""
    context = context if isinstance(context, dict) else {}
    configurable = configurable if isinstance(configurable, dict) else {}
    effort = _value(context, configurable, "reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise ModelOverrideError(
            f"reasoning_effort '{effort}' is not one of {', '.join(REASONING_EFFORTS)}."
        )
    params = _value(context, configurable, "model_params") or {}
    if not isinstance(params, dict):
        raise ModelOverrideError("model_params must be an object.")
    for key, value in params.items():
        kind = OVERRIDABLE_PARAMS.get(key)
        if kind is None:
            raise ModelOverrideError(
                f"model_params.{key} cannot be set by a run; "
                f"it may set {', '.join(OVERRIDABLE_PARAMS)}."
            )
        if not _is_number(value, integer=kind is int):
            raise ModelOverrideError(f"model_params.{key} must be a {kind.__name__}.")
    return ModelOverrides(reasoning_effort=effort, params=dict(params))


def _is_number(value: Any, integer: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if integer:
        return isinstance(value, int) and value > 0
    return math.isfinite(value) and value >= 0
