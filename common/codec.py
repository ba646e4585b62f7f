"""JSON and proto <-> dict conversion, and the small vocabulary shared on the wire."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import orjson

from waybill.common.sealed import redacted_kwargs
from waybill.common.statuses import MultitaskStrategy, RunStatus
from waybill.v1 import common_pb2

# LangGraph Platform derives a graph's system assistant id as uuid5 of this and the graph id.
NAMESPACE_GRAPH = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")
# Waybill's own: the ids of the threads' logs in the journal (see thread_log_id).
NAMESPACE_THREAD_LOG = uuid.UUID("3f6c1a7e-2b8d-5e94-a0c1-7d52e9b4f018")

RUN_STATUS_NAMES = {
    common_pb2.RUN_STATUS_PENDING: RunStatus.PENDING,
    common_pb2.RUN_STATUS_RUNNING: RunStatus.RUNNING,
    common_pb2.RUN_STATUS_SUCCESS: RunStatus.SUCCESS,
    common_pb2.RUN_STATUS_ERROR: RunStatus.ERROR,
    common_pb2.RUN_STATUS_TIMEOUT: RunStatus.TIMEOUT,
    common_pb2.RUN_STATUS_INTERRUPTED: RunStatus.INTERRUPTED,
}
# Keyed by plain strings too: a StrEnum member hashes as its value.
RUN_STATUS_VALUES: dict[str, common_pb2.RunStatus] = {
    name: value for value, name in RUN_STATUS_NAMES.items()
}

MULTITASK_NAMES = {
    common_pb2.MULTITASK_STRATEGY_REJECT: MultitaskStrategy.REJECT,
    common_pb2.MULTITASK_STRATEGY_INTERRUPT: MultitaskStrategy.INTERRUPT,
    common_pb2.MULTITASK_STRATEGY_ROLLBACK: MultitaskStrategy.ROLLBACK,
    common_pb2.MULTITASK_STRATEGY_ENQUEUE: MultitaskStrategy.ENQUEUE,
}
MULTITASK_VALUES: dict[str, common_pb2.MultitaskStrategy] = {
    name: value for value, name in MULTITASK_NAMES.items()
}


def system_assistant_id(graph_id: str) -> str:
    return str(uuid.uuid5(NAMESPACE_GRAPH, graph_id))


def thread_log_id(thread_id: str) -> str:
    """The journal log of a thread's own events (its state updates), beside its runs'
    logs: a UUID of its own, so that it never names a run."""
    return str(uuid.uuid5(NAMESPACE_THREAD_LOG, thread_id))


def _fallback(value: Any) -> Any:
    """Serialize what orjson does not know: pydantic models, LangChain objects, sets."""
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if hasattr(value, "_asdict"):
        return value._asdict()
    if isinstance(value, set | frozenset):
        return list(value)
    if hasattr(value, "__dataclass_fields__"):
        return {name: getattr(value, name) for name in value.__dataclass_fields__}
    return repr(value)


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=_fallback, option=orjson.OPT_NON_STR_KEYS)


def loads(data: bytes | str | None, default: Any = None) -> Any:
    if not data:
        return default
    return orjson.loads(data)


def now_utc() -> datetime:
    return datetime.now(UTC)


def aware_utc(moment: datetime) -> datetime:
    """A stored time with its zone: SQLite hands times back without one; they are UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def iso(moment: datetime | None) -> str:
    return "" if moment is None else aware_utc(moment).isoformat()


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except (ValueError, TypeError, AttributeError):
        return False
    return True


def thread_to_dict(thread: common_pb2.Thread) -> dict[str, Any]:
    return {
        "thread_id": thread.thread_id,
        "created_at": thread.created_at,
        "updated_at": thread.updated_at,
        "metadata": loads(thread.metadata_json, {}),
        "status": thread.status,
        "values": loads(thread.values_json, None),
        "interrupts": loads(thread.interrupts_json, {}),
        "config": loads(thread.config_json, {}),
        "error": _error_of(thread),
        "state_updated_at": thread.state_updated_at or thread.updated_at,
    }


def _error_of(thread: common_pb2.Thread) -> dict[str, str] | None:
    if not thread.HasField("error"):
        return None
    return {"error": thread.error.error, "message": thread.error.message}


def is_active(run: common_pb2.Run) -> bool:
    return run.status in (common_pb2.RUN_STATUS_PENDING, common_pb2.RUN_STATUS_RUNNING)


def shown_status(run: common_pb2.Run) -> str:
    """A run's status as the API shows it. A cancel is durable once recorded (its
    runner, or the next claim, carries it out), so an active run with an interrupt
    on record reads `interrupted` at once, as LangGraph Platform's reads do right
    after a `wait=false` cancel; its terminal write follows once the runner stopped."""
    if run.cancel_action == "interrupt" and is_active(run):
        return "interrupted"
    return RUN_STATUS_NAMES.get(run.status, "pending")


def rolling_back(run: common_pb2.Run) -> bool:
    """An active run with a rollback on record: gone as far as reads go (its end
    deletes it), as LangGraph Platform deletes it when the cancel is asked."""
    return run.cancel_action == "rollback" and is_active(run)


def run_to_dict(run: common_pb2.Run) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "assistant_id": run.assistant_id,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "status": shown_status(run),
        "metadata": loads(run.metadata_json, {}),
        "kwargs": public_kwargs(loads(run.kwargs_json, {})),
        "multitask_strategy": MULTITASK_NAMES.get(run.multitask_strategy, "reject"),
        # LangGraph Platform's LangSmith tracing project; Waybill sends no traces there.
        "langsmith_session_name": None,
        # Waybill's addition: token usage once the run ended (common/usage.py), else null.
        "usage": loads(run.usage_json, None),
    }


def public_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A run's kwargs as LangGraph Platform shows them (secrets hidden): `stream_mode`
    always a list, and its names for the streaming and durability flags beside
    Waybill's own (`stream_subgraphs`, `durability`), which the runner reads."""
    shown = dict(redacted_kwargs(kwargs))
    mode = shown.get("stream_mode") or "values"
    shown["stream_mode"] = [mode] if isinstance(mode, str) else list(mode)
    shown.setdefault("subgraphs", bool(shown.get("stream_subgraphs", False)))
    shown.setdefault("resumable", True)  # every Waybill run's stream can be joined again
    shown.setdefault("checkpoint_during", shown.get("durability", "async") != "exit")
    return shown
