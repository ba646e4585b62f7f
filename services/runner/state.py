"""LangGraph `StateSnapshot` -> the JSON shape LangGraph Platform returns for thread state."""

from __future__ import annotations

from typing import Any

from langgraph.types import StateSnapshot


def _checkpoint(config: Any) -> dict[str, Any] | None:
    if not config:
        return None
    configurable = config.get("configurable") or {}
    return {
        "thread_id": configurable.get("thread_id"),
        "checkpoint_ns": configurable.get("checkpoint_ns", ""),
        "checkpoint_id": configurable.get("checkpoint_id"),
    }


def snapshot_to_dict(snapshot: StateSnapshot) -> dict[str, Any]:
    checkpoint = _checkpoint(snapshot.config)
    tasks = [
        {
            "id": task.id,
            "name": task.name,
            "path": list(task.path),
            "error": repr(task.error) if task.error else None,
            "interrupts": [
                {"value": i.value, "id": getattr(i, "id", None)} for i in task.interrupts
            ],
            "checkpoint": None,
            "state": snapshot_to_dict(task.state)
            if isinstance(task.state, StateSnapshot)
            else None,
            "result": task.result,
        }
        for task in snapshot.tasks
    ]
    return {
        "values": snapshot.values,
        "next": list(snapshot.next),
        "tasks": tasks,
        "metadata": snapshot.metadata or {},
        "created_at": snapshot.created_at,
        "checkpoint": checkpoint,
        "checkpoint_id": checkpoint["checkpoint_id"] if checkpoint else None,
        "parent_checkpoint": _checkpoint(snapshot.parent_config),
        "parent_checkpoint_id": (
            (snapshot.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        ),
        "interrupts": [
            {"value": i.value, "id": getattr(i, "id", None)} for i in snapshot.interrupts
        ],
    }


EMPTY_STATE: dict[str, Any] = {
    "values": {},
    "next": [],
    "tasks": [],
    "metadata": {},
    "created_at": None,
    "checkpoint": None,
    "checkpoint_id": None,
    "parent_checkpoint": None,
    "parent_checkpoint_id": None,
    "interrupts": [],
}
