"""What a run hands its graph: its config and its input (its limits: scope.py)."""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.runnables import RunnableConfig

from waybill.services.runner.graphs.context import with_auth_user
from waybill.services.runner.run.commands import as_command
from waybill.v1 import common_pb2


def run_config(run: common_pb2.Run, kwargs: dict[str, Any]) -> RunnableConfig:
    config: dict[str, Any] = dict(kwargs.get("config") or {})
    configurable = with_auth_user(dict(config.get("configurable") or {}))
    configurable.update(
        thread_id=run.thread_id,
        run_id=run.run_id,
        assistant_id=run.assistant_id,
        graph_id=run.graph_id,
    )
    if kwargs.get("checkpoint_id"):
        configurable["checkpoint_id"] = kwargs["checkpoint_id"]
    config["configurable"] = configurable
    # Stamped on every checkpoint: the database refuses one whose epoch is stale.
    config["metadata"] = {
        **config.get("metadata", {}),
        "run_id": run.run_id,
        "run_epoch": run.epoch,
    }
    if run.attempt <= 1:
        # As LangGraph Platform does: the run's id is the root run's id, which the graph
        # reads as `runtime.execution_info.run_id` (a retry gets a fresh one, for tracing).
        config["run_id"] = uuid.UUID(run.run_id)
    return config  # type: ignore[return-value]


def thread_config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def graph_input(kwargs: dict[str, Any]) -> Any:
    command = kwargs.get("command")
    if command:
        return as_command(command)
    return kwargs.get("input")
