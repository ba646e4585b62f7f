"""/a2a/{assistant_id}: the Agent2Agent protocol's JSON-RPC binding, as LangGraph
Platform serves it (`langgraph_api/api/a2a.py`): every assistant is an agent, an
A2A context is a thread (a new context a new thread, `contextId` = `thread_id`),
a task is one run on it (`taskId` = "<thread_id>:<run_id>"). `message/send`
runs the assistant and answers the finished task; `message/stream` answers SSE
events (the task submitted, the agent's words while it works, the reply as an
artifact, the final status). Runs go through StartRun, as every run does.

The slash names (`message/send`, `message/stream`) answer in the A2A spec's
shapes ("user", "completed"); the v1.0 names (`SendMessage`,
`SendStreamingMessage`) in v1.0's ("ROLE_USER", "TASK_STATE_COMPLETED"), as on
the Platform. `tasks/get` and `tasks/cancel` are in a2a_tasks.py, the shapes in
a2a_shapes.py. Not served yet (a JSON-RPC error says so): `ListTasks`, the
extended card, continuing an open task by `taskId`, resuming an interrupt, A2UI.

The agent card: `GET /a2a/{id}`, `/a2a/{id}/.well-known/agent-card.json` (and
`agent.json`), and `/.well-known/agent-card.json?assistant_id=...`."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any
from uuid import UUID

import grpc
import orjson
from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import JSONResponse

from waybill.common import codec
from waybill.gateway.routes.a2a_shapes import (
    CONTENT_TYPE_NOT_SUPPORTED,
    HISTORY_SCOPE_HEADER,
    TASK_NOT_FOUND,
    UNSUPPORTED_OPERATION,
    V1_ROLES,
    HistoryOptions,
    a2a_role,
    agent_message,
    content_text,
    history,
    history_options,
    interrupt_artifact,
    now,
    reply_parts,
    response_artifact,
    spec_format,
    task_id_of,
)
from waybill.gateway.routes.a2a_tasks import (
    TERMINAL_STATES,
    cancel_task,
    context_runs,
    get_task,
    known_task,
    run_status,
    task_ids_by_start,
    thread_values,
)
from waybill.gateway.routes.assistants import get_assistant
from waybill.gateway.routes.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    NOT_PARSED,
    PARSE_ERROR,
    RpcError,
    accepts,
    error_response,
    parsed_body,
    plain_error,
    refusal_message,
    require_scope,
    run_body,
    schemas_of,
)
from waybill.gateway.routes.runs import final_values, get_run_record, start_run
from waybill.gateway.routes.threads import peers_of
from waybill.gateway.schemas import no_body, protocol_error_responses
from waybill.gateway.streams import journal_events, sse_response
from waybill.v1 import common_pb2

router = APIRouter(tags=["a2a"], responses=protocol_error_responses())

log = logging.getLogger("waybill.gateway.a2a")

HISTORY_SCOPE_EXTENSION = "https://langchain.com/a2a/extensions/history-scope/v1"
DEFAULT_MODES = ("application/json", "text/plain")

METHOD_ALIASES = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
}
# Every method the Platform knows, with the scope it needs here ("" for any key).
METHOD_SCOPES = {
    "SendMessage": "runs:create",
    "SendStreamingMessage": "runs:create",
    "GetTask": "runs:read",
    "CancelTask": "runs:cancel",
    "ListTasks": "runs:read",
    "GetExtendedAgentCard": "",
}


# ---- the JSON-RPC endpoint ---------------------------------------------------------


@dataclass(frozen=True)
class Call:
    rpc_id: Any
    method: str  # the v1.0 name
    params: dict[str, Any]
    spec_format: bool  # called by its slash name: answer in the spec's shapes

    def answer(self, result: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": self.rpc_id, "result": result}
        return spec_format(body) if self.spec_format else body

    def failure(self, error: RpcError) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": self.rpc_id, "error": error.body()}


@router.post(
    "/a2a/{assistant_id}",
    responses={
        200: {"content": {"text/event-stream": {}}},  # SendStreamingMessage's answer
        **no_body(202, "A JSON-RPC response: nothing to answer"),
    },
)
async def a2a_post(assistant_id: str, request: Request) -> Response:
    message = await parsed_body(request)
    if message is NOT_PARSED:
        return error_response(None, RpcError(PARSE_ERROR, "Invalid JSON payload"))
    try:
        rpc = read_call(message)
    except RpcError as error:
        rpc_id = message.get("id") if isinstance(message, dict) else None
        return error_response(rpc_id if is_valid_id(rpc_id) else None, error)
    if rpc is None:
        return Response(status_code=202)  # a JSON-RPC response: nothing to answer
    streaming = rpc.method == "SendStreamingMessage"
    if streaming and not accepts(request, "text/event-stream"):
        return plain_error("Accept header must include text/event-stream for streaming", 400)
    if not streaming and not accepts(request, "application/json"):
        return plain_error("Accept header must include application/json", 400)
    if METHOD_SCOPES[rpc.method]:
        require_scope(request, METHOD_SCOPES[rpc.method])
    if not codec.is_uuid(assistant_id):
        return error_response(
            rpc.rpc_id, RpcError(INVALID_PARAMS, "Invalid assistant ID: must be a UUID")
        )
    if streaming:
        return await stream_message(request, str(uuid.UUID(assistant_id)), rpc)
    try:
        result = await dispatch(request, str(uuid.UUID(assistant_id)), rpc)
    except RpcError as error:
        return JSONResponse(rpc.failure(error))
    return JSONResponse(rpc.answer(result))


def is_valid_id(rpc_id: Any) -> bool:
    return rpc_id is None or (
        isinstance(rpc_id, (str, int, float)) and not isinstance(rpc_id, bool)
    )


def read_call(message: Any) -> Call | None:
    """The request in a JSON-RPC message (None for a response), checked as the
    Platform checks it; anything else raises the error to answer."""
    if not isinstance(message, dict):
        raise RpcError(INVALID_REQUEST, "Invalid message format: expected object")
    if message.get("jsonrpc") != "2.0":
        raise RpcError(
            INVALID_REQUEST, "Invalid JSON-RPC message: missing or invalid jsonrpc version"
        )
    rpc_id, method = message.get("id"), message.get("method")
    spec = isinstance(method, str) and method in METHOD_ALIASES
    method = METHOD_ALIASES.get(method, method) if isinstance(method, str) else method
    if not is_valid_id(rpc_id):
        raise RpcError(
            INVALID_REQUEST, "Invalid JSON-RPC request: 'id' must be a string, number, or null"
        )
    if method is not None and not isinstance(method, str):
        raise RpcError(METHOD_NOT_FOUND, "Method not found: method must be a string")
    if method is not None and method not in METHOD_SCOPES:
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
    params = message.get("params", {})
    if method in ("SendMessage", "SendStreamingMessage"):
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: must be an object")
        if not isinstance(params.get("message"), dict) or not params["message"]:
            raise RpcError(INVALID_PARAMS, "Missing or invalid 'message' in params")
    if rpc_id is not None and method:
        return Call(rpc_id, method, params if isinstance(params, dict) else {}, spec)
    if rpc_id is not None and ("result" in message or "error" in message):
        return None
    if rpc_id is not None:
        raise RpcError(INVALID_REQUEST, "Invalid JSON-RPC request: missing 'method' field")
    raise RpcError(
        INVALID_REQUEST, "Invalid message format: must be a JSON-RPC request or notification"
    )


async def dispatch(request: Request, assistant_id: str, rpc: Call) -> dict[str, Any]:
    if rpc.method == "SendMessage":
        return await send_message(request, assistant_id, rpc.params)
    if rpc.method == "GetTask":
        return await get_task(request, assistant_id, rpc.params)
    if rpc.method == "CancelTask":
        return await cancel_task(request, assistant_id, rpc.params)
    raise RpcError(UNSUPPORTED_OPERATION, f"{rpc.method} is not supported by this server yet")


# ---- one turn: a message in, a run started -----------------------------------------


@dataclass(frozen=True)
class Turn:
    """A checked `message/send` or `message/stream`: what the run is made of."""

    assistant_id: str
    context_id: str
    task_start_id: str  # stamped on the user's message and the run: names the task
    message: dict[str, Any]
    input: dict[str, Any]
    run_context: Any
    history: HistoryOptions


async def prepared_turn(request: Request, assistant_id: str, params: dict[str, Any]) -> Turn:
    options = history_options(request, params.get("configuration"))
    message = params.get("message")
    if not message:
        raise RpcError(INVALID_PARAMS, "Missing 'message' in params")
    parts = checked_parts(message)
    await require_conversational(request, assistant_id, parts)
    context_id, task_id = message.get("contextId"), message.get("taskId")
    if context_id is not None and not isinstance(context_id, str):
        raise RpcError(INVALID_PARAMS, "contextId must be a string")
    if task_id is not None and not isinstance(task_id, str):
        raise RpcError(INVALID_PARAMS, "taskId must be a string")
    if task_id is not None:
        await refuse_continuing(request, task_id, context_id, assistant_id)
    task_start_id = str(uuid.uuid4())
    role = V1_ROLES.get(message["role"], message["role"])
    try:
        graph_input = message_input(parts, role, message["messageId"], task_start_id)
    except ValueError as error:
        raise RpcError(CONTENT_TYPE_NOT_SUPPORTED, str(error)) from None
    return Turn(
        assistant_id=assistant_id,
        context_id=context_id or str(uuid.uuid4()),
        task_start_id=task_start_id,
        message=message,
        input=graph_input,
        run_context=params.get("context"),
        history=options,
    )


async def refuse_continuing(
    request: Request, task_id: str, context_id: str | None, assistant_id: str
) -> None:
    """A message to an existing task: an ended one takes none (as on the Platform);
    resuming one that waits is not served yet."""
    task = await known_task(request, task_id, context_id, assistant_id)
    if task is None:
        raise RpcError(TASK_NOT_FOUND, f"Task not found: {task_id}")
    if task.state in TERMINAL_STATES:
        raise RpcError(UNSUPPORTED_OPERATION, "A terminal task cannot accept another message")
    raise RpcError(
        UNSUPPORTED_OPERATION,
        "Continuing an open task (taskId) is not supported by this server yet",
    )


def checked_parts(message: dict[str, Any]) -> list[Any]:
    if not message.get("messageId"):
        raise RpcError(INVALID_PARAMS, "Missing required 'messageId' in message")
    if not message.get("role"):
        raise RpcError(INVALID_PARAMS, "Missing required 'role' in message")
    if not isinstance(message["role"], str):
        raise RpcError(INVALID_PARAMS, "Invalid params: 'role' must be a string")
    parts = message.get("parts", [])
    if not isinstance(parts, list):
        raise RpcError(INVALID_PARAMS, "Invalid params: 'parts' must be an array")
    if not parts:
        raise RpcError(INVALID_PARAMS, "Message must contain at least one part")
    return parts


async def require_conversational(request: Request, assistant_id: str, parts: list[Any]) -> None:
    """Text and file parts become messages: the graph's input must have `messages`."""
    assistant = await assistant_of(request, assistant_id)
    if not any(isinstance(p, dict) and ("text" in p or "file" in p) for p in parts):
        return
    schemas = await schemas_of(request, assistant_id)
    input_schema = schemas.get("input_schema") or schemas.get("state_schema")
    if not input_schema:
        raise RpcError(
            INVALID_PARAMS,
            f"Assistant '{assistant_id}' has no input schema defined. A2A conversational "
            "agents using text or file parts must have an input schema with a 'messages' field.",
        )
    properties = input_schema.get("properties", {})
    if "messages" not in properties:
        raise RpcError(
            INVALID_PARAMS,
            f"Assistant '{assistant_id}' (graph '{assistant['graph_id']}') does not support A2A "
            "conversational messages. Graph input schema must include a 'messages' field to "
            f"accept text or file parts. Available input fields: {list(properties)}",
        )


async def assistant_of(request: Request, assistant_id: str) -> dict[str, Any]:
    try:
        return await get_assistant(assistant_id, request)
    except HTTPException as error:
        if error.status_code == 404:
            raise RpcError(INVALID_PARAMS, f"Assistant '{assistant_id}' not found") from None
        if error.status_code in (401, 403) or error.status_code >= 500:
            raise
        message = f"Failed to get assistant '{assistant_id}': {refusal_message(error)}"
        raise RpcError(INVALID_PARAMS, message) from None


def message_input(
    parts: list[Any], role: str, message_id: str, task_start_id: str
) -> dict[str, Any]:
    """A2A parts as the graph's input: text parts each a message (or, beside a
    file, one message of content blocks); data parts' objects merged in as input
    keys. The message carries the task's start id, so that history can name the
    task each message belongs to."""
    langgraph_role = "human" if role == "ROLE_USER" else "assistant"
    with_files = any(isinstance(p, dict) and "file" in p for p in parts)
    messages: list[dict[str, Any]] = []
    blocks: list[dict[str, Any]] = []
    data: dict[str, Any] = {}
    for part in parts:
        kind = part_kind(part)
        if kind == "text" and not with_files:
            messages.append({"role": langgraph_role, "content": part["text"], "id": message_id})
        elif kind == "text":
            blocks.append({"type": "text", "text": part["text"]})
        elif kind == "file":
            blocks.append(file_block(part))
        elif not isinstance(part.get("data", {}), dict):
            raise ValueError("DataPart must contain a JSON object in the 'data' field")
        else:
            data.update(part.get("data", {}))
    if with_files:
        messages.append({"role": langgraph_role, "content": blocks, "id": message_id})
    for graph_message in messages:
        graph_message["additional_kwargs"] = {"a2a": {"task_start_id": task_start_id}}
    if not messages and not data:
        raise ValueError("Message must contain at least one valid text, data, or file part")
    return {**({"messages": messages} if messages else {}), **data}


def part_kind(part: Any) -> str:
    if not isinstance(part, dict):
        raise ValueError(
            "Each message part must be an object. "
            "A2A agents support 'text', 'data', and 'file' parts only."
        )
    present = [key for key in ("text", "file", "data") if key in part]
    if len(present) > 1:
        raise ValueError(
            "Each message part must contain exactly one of 'text', 'file', or 'data'. "
            f"Got multiple: {present}."
        )
    if not present:
        raise ValueError(
            "Unsupported part type. A2A agents support 'text', 'data', and 'file' parts only."
        )
    return present[0]


def file_block(part: dict[str, Any]) -> dict[str, Any]:
    """A FilePart as a LangChain content block; a `uri` is passed on, never fetched."""
    file = part.get("file")
    if not isinstance(file, dict):
        raise ValueError("FilePart must contain a 'file' object with 'bytes' or 'uri'.")
    data, uri = file.get("bytes"), file.get("uri")
    if (data is None) == (uri is None):
        raise ValueError("FilePart 'file' must contain exactly one of 'bytes' or 'uri'.")
    mime_type = file.get("mimeType")
    top = mime_type.split("/", 1)[0].lower() if isinstance(mime_type, str) else ""
    block: dict[str, Any] = {"type": top if top in ("image", "audio", "video") else "file"}
    block["base64" if data is not None else "url"] = data if data is not None else uri
    if mime_type:
        block["mime_type"] = mime_type
    if file.get("name"):
        block["extras"] = {"filename": file["name"]}
    return block


async def start_turn(request: Request, turn: Turn, stream_mode: list[str]) -> common_pb2.Run:
    """The turn's run on its context's thread (created if new), through StartRun."""
    body = run_body(
        {
            "assistant_id": turn.assistant_id,
            "input": turn.input,
            "context": turn.run_context,
            "metadata": {"a2a": {"task_start_id": turn.task_start_id}},
            "if_not_exists": "create",
            "stream_mode": stream_mode,
        }
    )
    try:
        return await start_run(peers_of(request), turn.context_id, body, request)
    except HTTPException as error:
        if error.status_code in (401,) or error.status_code >= 500:
            raise
        raise run_refusal(error, turn) from None


def run_refusal(error: HTTPException, turn: Turn) -> RpcError:
    """StartRun's refusal as the Platform words it."""
    detail = refusal_message(error)
    if error.status_code == 404 and "thread" in detail.lower():
        return RpcError(
            INVALID_PARAMS,
            f"Thread '{turn.context_id}' not found. "
            "Please create the thread first before sending messages to it.",
        )
    if error.status_code == 404:
        return RpcError(INVALID_PARAMS, f"Assistant '{turn.assistant_id}' not found")
    if error.status_code == 403:
        return RpcError(INVALID_PARAMS, "Access denied to assistant or thread")
    if error.status_code == 400:
        return RpcError(INVALID_PARAMS, f"Invalid request: {detail}")
    return RpcError(INVALID_PARAMS, f"Failed to create run: {detail}")


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


async def stream_message(request: Request, assistant_id: str, rpc: Call) -> Response:
    """SSE of JSON-RPC answers; a refusal before the run starts is one error event."""
    try:
        turn = await prepared_turn(request, assistant_id, rpc.params)
        run = await start_turn(request, turn, ["messages", "values"])
    except RpcError as error:
        return event_stream(request, single_event(rpc.failure(error)))
    return event_stream(request, ended_by_error(task_events(request, turn, run, rpc), rpc))


async def ended_by_error(
    events: AsyncIterator[dict[str, Any]], rpc: Call
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
        yield b"event: message\ndata: " + json_line(body) + b"\n\n"


def json_line(body: dict[str, Any]) -> bytes:
    # Unicode line separators would end an SSE line for some readers: escaped.
    return (
        orjson.dumps(body)
        .replace(b"\xc2\x85", b"\\u0085")
        .replace(b"\xe2\x80\xa8", b"\\u2028")
        .replace(b"\xe2\x80\xa9", b"\\u2029")
    )


async def task_events(
    request: Request, turn: Turn, run: common_pb2.Run, rpc: Call
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


# ---- the agent card ----------------------------------------------------------------


@router.get("/a2a/{assistant_id}")
@router.get("/a2a/{assistant_id}/.well-known/agent-card.json")
@router.get("/a2a/{assistant_id}/.well-known/agent.json")
async def assistant_agent_card(assistant_id: str, request: Request) -> Response:
    return await card_response(request, assistant_id)


@router.get("/.well-known/agent-card.json")
async def agent_card(request: Request, assistant_id: str | None = None) -> Response:
    if not assistant_id:
        return card_error("Missing required query parameter: assistant_id")
    return await card_response(request, assistant_id)


@router.delete("/a2a/{assistant_id}", status_code=405, response_class=Response)
async def a2a_delete(assistant_id: str) -> Response:
    return Response(status_code=405)  # no sessions to end (the Platform answers 405)


def card_error(message: str) -> Response:
    return JSONResponse({"error": {"code": INVALID_PARAMS, "message": message}}, status_code=400)


async def card_response(request: Request, assistant_id: str) -> Response:
    if not codec.is_uuid(assistant_id):
        return card_error(
            f"Failed to get assistant '{assistant_id}': Invalid assistant ID: must be a UUID"
        )
    try:
        assistant = await assistant_of(request, assistant_id)
    except RpcError as error:
        return card_error(error.message)
    schemas = await schemas_of(request, assistant_id)
    return JSONResponse(card_of(request, assistant, schemas))


def card_of(request: Request, assistant: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    """An assistant as an A2A agent with one skill, itself."""
    assistant_id = assistant["assistant_id"]
    input_schema = schemas.get("input_schema") or schemas.get("state_schema") or {}
    properties = input_schema.get("properties", {})
    description = assistant.get("description") or f"{assistant['name']} assistant"
    url = f"{base_url(request, assistant_id)}/a2a/{assistant_id}"
    modes = list(DEFAULT_MODES)
    skill = {
        "id": f"{assistant_id}-main",
        "name": f"{assistant['name']} Capabilities",
        "description": description,
        "tags": ["assistant", "langgraph"],
        "examples": [],
        "inputModes": modes,
        "outputModes": modes,
        "metadata": {
            "inputSchema": {
                "required": input_schema.get("required", []),
                "properties": sorted(properties),
                "supportsA2A": "messages" in properties,
            }
        },
    }
    return {
        "name": assistant["name"],
        "description": description,
        "url": url,
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {
            "streaming": True,
            "pushNotifications": False,
            "stateTransitionHistory": False,
            "extensions": [history_scope_extension()],
        },
        "defaultInputModes": modes,
        "defaultOutputModes": modes,
        "skills": [skill],
        "version": version("waybill"),
    }


def history_scope_extension() -> dict[str, Any]:
    return {
        "uri": HISTORY_SCOPE_EXTENSION,
        "description": "Choose task-only or full-context response history",
        "required": False,
        "params": {
            "header": HISTORY_SCOPE_HEADER,
            "values": ["context", "task"],
            "default": "context",
            "methods": ["SendMessage", "GetTask", "ListTasks"],
        },
    }


def base_url(request: Request, assistant_id: str) -> str:
    """Where the caller reached us (behind a proxy, `X-Forwarded-Proto` says the scheme)."""
    scheme = request.headers.get("x-forwarded-proto") or request.url.scheme
    host = request.url.hostname or "localhost"
    port = request.url.port
    path = (
        request.url.path.removesuffix("/.well-known/agent-card.json")
        .removesuffix("/.well-known/agent.json")
        .removesuffix(f"/a2a/{assistant_id}")
    )
    default_port = (scheme == "http" and port == 80) or (scheme == "https" and port == 443)
    return (
        f"{scheme}://{host}:{port}{path}"
        if port and not default_port
        else f"{scheme}://{host}{path}"
    )
