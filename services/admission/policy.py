"""The rules a run must pass before it is stored. `StartRun` calls `admit` and
nothing else creates runs."""

from __future__ import annotations

import math
import uuid
from datetime import timedelta
from typing import Any

from common import codec
from common.errors import invalid, refused
from services.admission.assistants import AssistantCatalog
from services.admission.records import RunRecord
from waybill.v1 import admission_pb2, common_pb2


def _model_name(kwargs: dict[str, Any]) -> str | None:
    context = kwargs.get("context") or {}
    configurable = (kwargs.get("config") or {}).get("configurable") or {}
    name = context.get("model_name") if isinstance(context, dict) else None
    return name or configurable.get("model_name")


def check_model_allowed(kwargs: dict[str, Any], allowed: list[str]) -> None:
    name = _model_name(kwargs)
    if name is not None and name not in allowed:
        raise refused(
            f"model_name '{name}' is not configured; allowed models: {', '.join(allowed)}."
        )


# A year: far beyond any sensible delay, and well inside what a timestamp can hold.
MAX_START_DELAY_SECONDS = 365 * 24 * 3600


def start_delay(after_seconds: float) -> timedelta:
    """How long a run waits before it may start (`after_seconds`)."""
    if not math.isfinite(after_seconds) or not 0 <= after_seconds <= MAX_START_DELAY_SECONDS:
        raise invalid(
            f"after_seconds must be between 0 and {MAX_START_DELAY_SECONDS} (got {after_seconds})."
        )
    return timedelta(seconds=after_seconds)


def build_run(
    request: admission_pb2.StartRunRequest,
    assistants: AssistantCatalog,
    allowed_models: list[str],
) -> RunRecord:
    """Validate a StartRun request and return the pending record to insert."""
    if not codec.is_uuid(request.thread_id):
        raise invalid(f"thread_id '{request.thread_id}' is not a UUID.")
    strategy = codec.MULTITASK_NAMES.get(
        request.multitask_strategy or common_pb2.MULTITASK_STRATEGY_ENQUEUE, "enqueue"
    )
    kwargs = codec.loads(request.kwargs_json, {})
    metadata = codec.loads(request.metadata_json, {})
    if not isinstance(kwargs, dict) or not isinstance(metadata, dict):
        raise invalid("kwargs and metadata must be JSON objects.")
    assistant_id, graph_id = assistants.resolve_for_run(request.assistant_id)
    check_model_allowed(kwargs, allowed_models)
    delay = start_delay(request.after_seconds)
    now = codec.now_utc()
    return RunRecord(
        run_id=str(uuid.uuid4()),
        thread_id=request.thread_id,
        assistant_id=assistant_id,
        graph_id=graph_id,
        status="pending",
        multitask_strategy=strategy,
        metadata=metadata,
        kwargs=kwargs,
        # As LangGraph does: a delayed run is created when it becomes due.
        created_at=now + delay,
        updated_at=now,
    )
