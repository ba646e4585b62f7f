"""One A2A turn: a `message/send` or `message/stream` checked, its parts made the
graph's input, and its run started through StartRun on the context's thread."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, Request

from waybill.gateway.protocols.a2a.shapes import (
    CONTENT_TYPE_NOT_SUPPORTED,
    TASK_NOT_FOUND,
    UNSUPPORTED_OPERATION,
    V1_ROLES,
    HistoryOptions,
    history_options,
)
from waybill.gateway.protocols.a2a.tasks import TERMINAL_STATES, known_task
from waybill.gateway.protocols.jsonrpc import (
    INVALID_PARAMS,
    RpcError,
    refusal_message,
    run_body,
    schemas_of,
)
from waybill.gateway.routes.assistants import get_assistant
from waybill.gateway.routes.run_admission import start_run
from waybill.gateway.routes.threads import peers_of
from waybill.v1 import common_pb2


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
