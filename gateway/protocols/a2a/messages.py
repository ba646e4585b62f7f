"""`message/send` (the finished task, once the run has ended) and `message/stream`
(SSE of JSON-RPC answers: the task submitted, the agent's words while it works,
the reply as an artifact, the final status)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import grpc
import orjson
from fastapi import HTTPException, Request, Response

from waybill.common import codec
from waybill.gateway.protocols.a2a.call import A2ACall
from waybill.gateway.protocols.a2a.shapes import (
    a2a_role,
    agent_message,
    content_text,
    history,
    interrupt_artifact,
    now,
    reply_parts,
    response_artifact,
    task_id_of,
)
from waybill.gateway.protocols.a2a.tasks import (
    context_runs,
    run_status,
    task_ids_by_start,
    thread_values,
)
from waybill.gateway.protocols.a2a.turn import Turn, prepared_turn, start_turn
from waybill.gateway.protocols.jsonrpc import INTERNAL_ERROR, RpcError
from waybill.gateway.routes.run_admission import get_run_record
from waybill.gateway.routes.run_results import final_values
from waybill.gateway.routes.threads import peers_of
from waybill.gateway.sse import sse_frame
from waybill.gateway.streams import journal_events, sse_response
from waybill.v1 import common_pb2

log = logging.getLogger("waybill.gateway.a2a")

# ---- message/send -----------------------------------------------------------------


async def send_message(
    request: Request, assistant_id: str, params: dict[str, Any]
) -> dict[str, Any]:
    turn = await prepared_turn(request, assistant_id, params)
    run = await start_turn(request, turn, ["values"])
    result = await final_values(peers_of(request), run)
    if "messages" not in turn.input and isinstance(result, dict) and "__error__" not in result:
        # The Platform reads a data-only turn's reply from the messages the run
        # added; a graph without messages shows `'messages': []` in its text.
        result = {**result, "messages": result.get("messages") or []}
    task_ids = task_ids_by_start(await context_runs(request, run.thread_id), assistant_id)
    return {"task": finished_task(turn, run, result, task_ids)}


def finished_task(
    turn: Turn, run: common_pb2.Run, result: Any, task_ids: dict[str, str]
) -> dict[str, Any]:
    task_id = task_id_of(run)
    result = result if isinstance(result, dict) else {"value": result}
    task: dict[str, Any] = {"kind": "task", "id": task_id, "contextId": run.thread_id}
    if turn.history.length != 0:
        messages = result.get("messages") or []
        task["history"] = history(messages, task_id, run.thread_id, turn.history, task_ids)
    if "__error__" in result:
        text = f"Error executing assistant: {result['__error__'].get('error')}"
        task["status"] = {
            "state": "TASK_STATE_FAILED",
            "message": agent_message([{"kind": "text", "text": text}], task_id, run.thread_id),
        }
    elif "__interrupt__" in result:
        task["status"] = {"state": "TASK_STATE_INPUT_REQUIRED", "timestamp": now()}
        task["artifacts"] = [interrupt_artifact(result["__interrupt__"])]
    else:
        task["status"] = {"state": "TASK_STATE_COMPLETED", "timestamp": now()}
        task["artifacts"] = [response_artifact(reply_parts(result), turn.assistant_id)]
    return task


# ---- message/stream ----------------------------------------------------------------


async def stream_message(request: Request, assistant_id: str, rpc: A2ACall) -> Response:
    """SSE of JSON-RPC answers; a refusal before the run starts is one error event."""
    try:
        turn = await prepared_turn(request, assistant_id, rpc.params)
        run = await start_turn(request, turn, ["messages", "values"])
    except RpcError as error:
        return event_stream(request, single_event(rpc.failure(error)))
    return event_stream(request, ended_by_error(task_events(request, turn, run, rpc), rpc))


async def ended_by_error(
    events: AsyncIterator[dict[str, Any]], rpc: A2ACall
) -> AsyncIterator[dict[str, Any]]:
    """Once the stream has started, a service failing mid-way is a last JSON-RPC
    error event (as on the Platform), not a broken response."""
    try:
        async for event in events:
            yield event
    except (HTTPException, grpc.aio.AioRpcError):
        log.exception("A2A stream of %s failed", rpc.rpc_id)
        yield rpc.failure(RpcError(INTERNAL_ERROR, "Internal server error"))


def event_stream(request: Request, events: AsyncIterator[dict[str, Any]]) -> Response:
    settings = request.app.state.settings
    return sse_response(
        sse_frames_of(events), {}, settings.sse_heartbeat_seconds, settings.stream_drain_seconds
    )


async def single_event(body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    yield body


async def sse_frames_of(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for body in events:
        yield sse_frame("message", json_line(body))


def json_line(body: dict[str, Any]) -> bytes:
    # Unicode line separators would end an SSE line for some readers: escaped.
    return (
        orjson.dumps(body)
        .replace(b"\xc2\x85", b"\\u0085")
        .replace(b"\xe2\x80\xa8", b"\\u2028")
        .replace(b"\xe2\x80\xa9", b"\\u2029")
    )


async def task_events(
    request: Request, turn: Turn, run: common_pb2.Run, rpc: A2ACall
) -> AsyncIterator[dict[str, Any]]:
    """The task submitted; a working status-update per chunk of the agent's words;
    at the end the reply as an artifact and the final status (or the failure)."""
    task_id, context_id = task_id_of(run), run.thread_id
    submitted = {**turn.message, "kind": "message", "taskId": task_id, "contextId": context_id}
    yield rpc.answer(
        {
            "task": {
                "kind": "task",
                "id": task_id,
                "contextId": context_id,
                "history": [submitted],
                "status": {"state": "TASK_STATE_SUBMITTED", "timestamp": now()},
            }
        }
    )
    failure: dict[str, Any] | None = None
    async for event in journal_events(peers_of(request).journal, run.run_id):
        data = codec.loads(event.data)
        if event.event == "error":
            failure = data if isinstance(data, dict) else {"message": str(data)}
        elif event.event == "values":
            failure = None  # a retried step's error is over
        elif event.event.startswith("messages") and isinstance(data, list) and data:
            update = working_update(data, task_id, context_id)
            if update is not None:
                yield rpc.answer(update)
    ending = await ended(request, run, failure)
    for update in final_updates(turn, task_id, context_id, ending):
        yield rpc.answer(update)


@dataclass(frozen=True)
class Ending:
    """How a streamed task ended: its failure, or its values (None when cancelled)."""

    failure: dict[str, Any] | None = None
    values: dict[str, Any] | None = None


async def ended(request: Request, run: common_pb2.Run, failure: dict[str, Any] | None) -> Ending:
    """Read once the run's log has ended. A cancelled run ends `canceled`, as
    `tasks/get` says (the Platform's stream says `completed` there)."""
    if failure is not None:
        return Ending(failure=failure)
    record = await get_run_record(peers_of(request), UUID(run.thread_id), UUID(run.run_id))
    if run_status(record) == "interrupted":
        return Ending()
    return Ending(values=await thread_values(request, run))


def working_update(items: list[Any], task_id: str, context_id: str) -> dict[str, Any] | None:
    """A chunk of the agent's words as a `working` status-update; None when it has none."""
    text = "".join(
        content_text(item.get("content"))
        for item in items
        if isinstance(item, dict) and a2a_role(item) is not None
    )
    if not text:
        return None
    message = agent_message([{"kind": "text", "text": text}], task_id, context_id)
    return {
        "taskId": task_id,
        "contextId": context_id,
        "kind": "status-update",
        "status": {"state": "TASK_STATE_WORKING", "message": message, "timestamp": now()},
        "final": False,
    }


def final_updates(
    turn: Turn, task_id: str, context_id: str, ending: Ending
) -> list[dict[str, Any]]:
    """The last events: the reply (or the interrupt) as an artifact, then the final status."""
    ids = {"taskId": task_id, "contextId": context_id}
    updates: list[dict[str, Any]] = []
    status: dict[str, Any] = {"state": "TASK_STATE_CANCELED", "timestamp": now()}
    if ending.failure is not None:
        failure = ending.failure
        text = str(failure.get("message") or failure.get("error") or "")
        message = agent_message([{"kind": "text", "text": text}], task_id, context_id)
        status = {"state": "TASK_STATE_FAILED", "message": message, "timestamp": now()}
    elif ending.values is not None and "__interrupt__" in ending.values:
        artifact = interrupt_artifact(ending.values["__interrupt__"])
        updates.append({**ids, "kind": "artifact-update", "artifact": artifact})
        status = {"state": "TASK_STATE_INPUT_REQUIRED", "timestamp": now()}
    elif ending.values is not None:
        artifact = response_artifact(reply_parts(ending.values), turn.assistant_id)
        updates.append(
            {
                **ids,
                "kind": "artifact-update",
                "artifact": artifact,
                "append": False,
                "lastChunk": True,
            }
        )
        status = {"state": "TASK_STATE_COMPLETED", "timestamp": now()}
    updates.append({**ids, "kind": "status-update", "status": status, "final": True})
    return updates
