"""LangGraph `StateSnapshot` -> the JSON shape LangGraph Platform returns for thread state,
and the configs that read it."""

from __future__ import annotations

from typing import Any

from langgraph.types import StateSnapshot, StateUpdate

from waybill.common import codec
from waybill.common.statuses import ThreadStatus
from waybill.services.runner.run.commands import as_command
from waybill.v1 import admission_pb2


def _checkpoint(config: Any) -> dict[str, Any] | None:
    """A checkpoint's reference as LangGraph Platform writes it; a subgraph's carries
    the map of its parents' checkpoints, which reading it again needs."""
    configurable = (config or {}).get("configurable") or {}
    if not configurable.get("thread_id") or not configurable.get("checkpoint_id"):
        return None
    checkpoint = {
        "checkpoint_id": configurable["checkpoint_id"],
        "thread_id": configurable["thread_id"],
        "checkpoint_ns": configurable.get("checkpoint_ns") or "",
    }
    if "checkpoint_map" in configurable:
        checkpoint["checkpoint_map"] = configurable["checkpoint_map"]
    return checkpoint


def _task_checkpoint(state: Any) -> dict[str, Any] | None:
    """Where a subgraph task's own state lives, when it is not read inline
    (`subgraphs=false`): LangGraph gives its config, the platform its configurable."""
    if state is None or isinstance(state, StateSnapshot):
        return None
    return dict(state.get("configurable") or {})


def update_reply(written: Any) -> dict[str, Any]:
    """`update_state`'s answer: the new checkpoint, and the deprecated fields beside it."""
    configurable = dict((written or {}).get("configurable") or {})
    return {
        "checkpoint": configurable,
        "configurable": configurable,
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
            "checkpoint": _task_checkpoint(task.state),
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
        "checkpoint_id": (snapshot.config or {}).get("configurable", {}).get("checkpoint_id"),
        "parent_checkpoint": _checkpoint(snapshot.parent_config),
        "parent_checkpoint_id": (
            (snapshot.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        ),
        "interrupts": [
            {"value": i.value, "id": getattr(i, "id", None)} for i in snapshot.interrupts
        ],
    }


# A thread no run has written yet, as LangGraph Platform answers it (metadata null).
EMPTY_STATE: dict[str, Any] = {
    "values": {},
    "next": [],
    "tasks": [],
    "metadata": None,
    "created_at": None,
    "checkpoint": None,
    "checkpoint_id": None,
    "parent_checkpoint": None,
    "parent_checkpoint_id": None,
    "interrupts": [],
}


def superstep_updates(supersteps: list[dict[str, Any]]) -> list[list[StateUpdate]]:
    """LangGraph Platform's supersteps (thread creation's `supersteps`) as LangGraph's
    bulk updates: each update's `command` if it has one, else its `values`."""
    return [[_state_update(update) for update in step["updates"]] for step in supersteps]


def _state_update(update: dict[str, Any]) -> StateUpdate:
    command = update.get("command")
    if command:
        values: Any = as_command(command)
    else:
        values = update.get("values")
    return StateUpdate(values, update.get("as_node"))


def thread_record(thread_id: str, state: dict[str, Any]) -> admission_pb2.RecordThreadStateRequest:
    """What a state written outside a run leaves on the thread's record, as LangGraph
    Platform sets it: `interrupted` while nodes are still to run, else `idle`."""
    interrupts = {task["id"]: task["interrupts"] for task in state["tasks"] if task["interrupts"]}
    return admission_pb2.RecordThreadStateRequest(
        thread_id=thread_id,
        values_json=codec.dumps(state["values"]),
        interrupts_json=codec.dumps(interrupts),
        status=ThreadStatus.INTERRUPTED if state["next"] else ThreadStatus.IDLE,
    )


def state_config(thread_id: str, checkpoint_id: str = "") -> dict[str, Any]:
    """The config that reads a thread's state (at one checkpoint, when given)."""
    configurable = {"thread_id": thread_id}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def checkpoint_config(request: Any) -> dict[str, Any]:
    """The thread's config at the request's checkpoint: the namespace is always set
    (LangGraph's writers need it), a subgraph's map of parent checkpoints when given."""
    config = state_config(request.thread_id, request.checkpoint_id)
    config["configurable"]["checkpoint_ns"] = request.checkpoint_ns
    if request.checkpoint_map:
        config["configurable"]["checkpoint_map"] = dict(request.checkpoint_map)
    return config
