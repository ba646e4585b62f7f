"""The rules a run must pass before it is stored. `StartRun` calls `admit` and
nothing else creates runs."""

from __future__ import annotations

import uuid
from typing import Any

from common import codec
from common.errors import invalid, refused
from services.admission.assistants import with_assistant_defaults
from services.admission.records import AssistantRecord, RunRecord
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


def build_run(
    request: admission_pb2.StartRunRequest,
    assistant: AssistantRecord,
    allowed_models: list[str],
) -> RunRecord:
    """Validate a StartRun request for `assistant` (resolved from its assistant_id)
    and return the pending record to insert, with the assistant's defaults merged in."""
    if not codec.is_uuid(request.thread_id):
        raise invalid(f"thread_id '{request.thread_id}' is not a UUID.")
    strategy = codec.MULTITASK_NAMES.get(
        request.multitask_strategy or common_pb2.MULTITASK_STRATEGY_ENQUEUE, "enqueue"
    )
    kwargs = codec.loads(request.kwargs_json, {})
    metadata = codec.loads(request.metadata_json, {})
    if not isinstance(kwargs, dict) or not isinstance(metadata, dict):
        raise invalid("kwargs and metadata must be JSON objects.")
    kwargs = with_assistant_defaults(kwargs, assistant)
    check_model_allowed(kwargs, allowed_models)
    now = codec.now_utc()
    return RunRecord(
        run_id=str(uuid.uuid4()),
        thread_id=request.thread_id,
        assistant_id=assistant.assistant_id,
        graph_id=assistant.graph_id,
        status="pending",
        multitask_strategy=strategy,
        metadata=metadata,
        kwargs=kwargs,
        created_at=now,
        updated_at=now,
    )
