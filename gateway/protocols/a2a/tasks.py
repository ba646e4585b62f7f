"""A2A tasks that exist already: `tasks/get` and `tasks/cancel`, and finding a
task (a run of the assistant on the context's thread) from its id
("<thread_id>:<run_id>", or a run id with `contextId`). Reads go through the
same authorization as `GET /threads/{tid}/runs/{rid}`; a cancel as
`POST …/cancel`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from fastapi import HTTPException, Request

from waybill.common import codec
from waybill.gateway.peers import call
from waybill.gateway.project_auth import authorize
from waybill.gateway.protocols.a2a.shapes import (
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    UNSUPPORTED_OPERATION,
    history,
    history_options,
    now,
    task_id_of,
)
from waybill.gateway.protocols.jsonrpc import INVALID_PARAMS, RpcError
from waybill.gateway.routes.run_admission import get_run_record
from waybill.gateway.routes.runs import cancel_run
from waybill.gateway.routes.threads import peers_of
from waybill.v1 import admission_pb2, common_pb2, runner_pb2

RUN_SCAN_LIMIT = 1000  # the runs of a context read to name its tasks

TASK_STATES = {
    "pending": "TASK_STATE_SUBMITTED",
    "running": "TASK_STATE_WORKING",
    "success": "TASK_STATE_COMPLETED",
    "interrupted": "TASK_STATE_CANCELED",  # cancelled; a graph's interrupt ends in success
    "error": "TASK_STATE_FAILED",
    "timeout": "TASK_STATE_FAILED",
}
TERMINAL_STATES = {
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
}


async def context_runs(request: Request, thread_id: str) -> list[common_pb2.Run]:
    reply = await call(
        peers_of(request).admission.ListRuns(
            admission_pb2.ListRunsRequest(thread_id=thread_id, limit=RUN_SCAN_LIMIT)
        )
    )
    return list(reply.runs)


def task_ids_by_start(runs: list[common_pb2.Run], assistant_id: str) -> dict[str, str]:
    """The assistant's tasks in a context, by the start id their user message carries."""
    task_ids = {}
    for run in runs:
        start_id = codec.loads(run.metadata_json, {}).get("a2a", {}).get("task_start_id")
        if run.assistant_id == assistant_id and isinstance(start_id, str):
            task_ids[start_id] = task_id_of(run)
    return task_ids


@dataclass(frozen=True)
class KnownTask:
    task_id: str
    run: common_pb2.Run
    state: str
    task_ids: dict[str, str]  # the context's tasks, for its history


def run_status(run: common_pb2.Run) -> str:
    return codec.RUN_STATUS_NAMES.get(run.status, "pending")


async def known_task(
    request: Request, task_id: str, context_id: str | None, assistant_id: str
) -> KnownTask | None:
    """The task, or None when there is no such task of this assistant (to the caller)."""
    parsed_context, _, run_id = task_id.rpartition(":")
    if parsed_context and context_id and parsed_context != context_id:
        return None
    context = context_id or parsed_context
    if not (codec.is_uuid(context) and codec.is_uuid(run_id)):
        return None
    try:
        await authorize(request, "threads", "read", {"thread_id": UUID(context)})
        run = await get_run_record(peers_of(request), UUID(context), UUID(run_id))
    except HTTPException as error:
        if error.status_code in (400, 404, 422):
            return None
        raise
    if run.assistant_id != assistant_id:
        return None
    runs = await context_runs(request, run.thread_id)
    state = TASK_STATES.get(run_status(run), "TASK_STATE_SUBMITTED")
    if state == "TASK_STATE_COMPLETED" and is_latest(run, runs) and await paused(request, run):
        state = "TASK_STATE_INPUT_REQUIRED"
    return KnownTask(task_id, run, state, task_ids_by_start(runs, assistant_id))


def is_latest(run: common_pb2.Run, runs: list[common_pb2.Run]) -> bool:
    latest = max(runs, key=lambda r: (r.created_at, r.run_id), default=run)
    return latest.run_id == run.run_id


async def paused(request: Request, run: common_pb2.Run) -> bool:
    """Whether the thread waits on an interrupt (human in the loop)."""
    thread = await call(
        peers_of(request).admission.GetThread(
            admission_pb2.GetThreadRequest(thread_id=run.thread_id)
        )
    )
    return thread.status == "interrupted"


def task_reference(params: dict[str, Any]) -> tuple[str, str | None]:
    task_id, context_id = params.get("id"), params.get("contextId")
    if not task_id:
        raise RpcError(INVALID_PARAMS, "Missing required parameter: id (task_id)")
    if not isinstance(task_id, str) or (context_id is not None and not isinstance(context_id, str)):
        raise RpcError(INVALID_PARAMS, "Task id and contextId must be strings")
    return task_id, context_id


# ---- tasks/get ----------------------------------------------------------------------


async def get_task(request: Request, assistant_id: str, params: dict[str, Any]) -> dict[str, Any]:
    task_id, context_id = task_reference(params)
    task = await known_task(request, task_id, context_id, assistant_id)
    if task is None:
        where = f" in context '{context_id}'" if context_id else ""
        raise RpcError(TASK_NOT_FOUND, f"Task not found: {task_id}{where}")
    options = history_options(request, params)
    shown: dict[str, Any] = {
        "kind": "task",
        "id": task_id,
        "contextId": task.run.thread_id,
        "status": {"state": task.state, "timestamp": task.run.updated_at or task.run.created_at},
    }
    if options.length != 0:
        messages = await thread_messages(request, task.run)
        shown["history"] = history(
            messages, task_id, task.run.thread_id, options, task.task_ids, through_task=True
        )
    note = status_note(task)
    if note:
        shown["status"]["message"] = {
            "kind": "message",
            "role": "ROLE_AGENT",
            "parts": [{"kind": "text", "text": note}],
            "messageId": str(uuid.uuid4()),
            "taskId": task_id,
        }
    return {"task": shown}


def status_note(task: KnownTask) -> str | None:
    if task.state == "TASK_STATE_COMPLETED":
        return "Task completed successfully"
    if task.state == "TASK_STATE_FAILED":
        return f"Task failed with status: {run_status(task.run)}"
    return None


async def thread_values(request: Request, run: common_pb2.Run) -> dict[str, Any]:
    """The thread's values now, with `__interrupt__` when it waits on one (as
    `wait` answers them)."""
    reply = await call(
        peers_of(request).runner.GetThreadState(
            runner_pb2.GetThreadStateRequest(thread_id=run.thread_id, graph_id=run.graph_id)
        )
    )
    state = codec.loads(reply.json, {})
    values = state.get("values")
    values = values if isinstance(values, dict) else {}
    if state.get("interrupts"):
        values = {**values, "__interrupt__": state["interrupts"]}
    return values


async def thread_messages(request: Request, run: common_pb2.Run) -> list[Any]:
    messages = (await thread_values(request, run)).get("messages")
    return messages if isinstance(messages, list) else []


# ---- tasks/cancel -------------------------------------------------------------------


async def cancel_task(
    request: Request, assistant_id: str, params: dict[str, Any]
) -> dict[str, Any]:
    task_id, context_id = task_reference(params)
    task = await known_task(request, task_id, context_id, assistant_id)
    if task is None:
        raise RpcError(TASK_NOT_FOUND, f"Task not found: {task_id}")
    if task.state in TERMINAL_STATES:
        raise RpcError(TASK_NOT_CANCELABLE, "Task is not cancelable in its current state")
    if task.state == "TASK_STATE_INPUT_REQUIRED":
        raise RpcError(
            UNSUPPORTED_OPERATION,
            "Canceling a task that waits for input is not supported by this server yet",
        )
    run = task.run
    await cancel_run(UUID(run.thread_id), UUID(run.run_id), request, wait=True)
    return {
        "task": {
            "kind": "task",
            "id": task_id,
            "contextId": run.thread_id,
            "status": {
                "state": "TASK_STATE_CANCELED",
                "timestamp": now(),
                "message": {
                    "kind": "message",
                    "role": "ROLE_AGENT",
                    "parts": [{"kind": "text", "text": "Task was canceled"}],
                    "messageId": str(uuid.uuid4()),
                    "taskId": task_id,
                },
            },
        }
    }
