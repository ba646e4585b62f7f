"""A2A's shapes of LangGraph's things: LangChain messages as A2A messages and
parts, a run's values as a task's reply, the context's history, and the spec's
(v0.x) names for v1.0's roles and states. No I/O here."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import Request

from waybill.gateway.protocols.jsonrpc import INVALID_PARAMS, RpcError
from waybill.v1 import common_pb2

# A2A's own error codes (JSON-RPC's server range).
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005

MAX_HISTORY_LENGTH = 10
HISTORY_SCOPE_HEADER = "LangGraph-A2A-History-Scope"

SPEC_ROLES = {"ROLE_USER": "user", "ROLE_AGENT": "agent"}
SPEC_STATES = {
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
}
V1_ROLES = {legacy: v1 for v1, legacy in SPEC_ROLES.items()}


@dataclass(frozen=True)
class HistoryOptions:
    """How much history a task shows: the last `length` messages (all when None),
    of the whole context or of the task only."""

    length: int | None = None
    scope: str = "context"


def history_options(request: Request, options: Any) -> HistoryOptions:
    """`historyLength` and `historyScope` (or the scope's header), checked."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params: 'configuration' must be an object")
    length = options.get("historyLength")
    if length is not None:
        if not isinstance(length, int) or isinstance(length, bool) or length < 0:
            raise RpcError(INVALID_PARAMS, "historyLength must be a non-negative integer")
        if length > MAX_HISTORY_LENGTH:
            raise RpcError(INVALID_PARAMS, f"historyLength cannot exceed {MAX_HISTORY_LENGTH}")
    scope = options.get("historyScope")
    if scope is None:
        scope = request.headers.get(HISTORY_SCOPE_HEADER, "context")
    if scope not in ("context", "task"):
        raise RpcError(INVALID_PARAMS, "historyScope must be 'context' or 'task'")
    return HistoryOptions(length, scope)


def spec_format(data: Any) -> Any:
    """v1.0's role and state names as the spec's, and `{"result": {"task": t}}` as
    `{"result": t}` (what the Platform answers to the slash names)."""
    if isinstance(data, list):
        return [spec_format(item) for item in data]
    if not isinstance(data, dict):
        return data
    shaped: dict[str, Any] = {}
    for key, value in data.items():
        if key == "role" and isinstance(value, str):
            shaped[key] = SPEC_ROLES.get(value, value)
        elif key == "state" and isinstance(value, str):
            shaped[key] = SPEC_STATES.get(value, value)
        elif key == "result" and isinstance(value, dict) and list(value) == ["task"]:
            shaped[key] = spec_format(value["task"])
        else:
            shaped[key] = spec_format(value)
    return shaped


def task_id_of(run: common_pb2.Run) -> str:
    return f"{run.thread_id}:{run.run_id}"


def now() -> str:
    return datetime.now(UTC).isoformat()


def agent_message(parts: list[dict[str, Any]], task_id: str, context_id: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "ROLE_AGENT",
        "parts": parts,
        "messageId": str(uuid.uuid4()),
        "taskId": task_id,
        "contextId": context_id,
    }


def response_artifact(parts: list[dict[str, Any]], assistant_id: str) -> dict[str, Any]:
    return {
        "artifactId": str(uuid.uuid4()),
        "name": "Assistant Response",
        "description": f"Response from assistant {assistant_id}",
        "parts": parts,
    }


def interrupt_artifact(interrupts: Any) -> dict[str, Any]:
    parts = []
    for interrupt in interrupts if isinstance(interrupts, list) else []:
        data = {"id": interrupt.get("id"), "value": interrupt.get("value")}
        if interrupt.get("response_schema") is not None:
            data["response_schema"] = interrupt["response_schema"]
        parts.append({"kind": "data", "data": data})
    return {
        "artifactId": str(uuid.uuid4()),
        "name": "Interrupt",
        "description": "Agent requires input to continue",
        "parts": parts,
    }


# ---- LangChain messages as A2A parts and messages ----------------------------------

USER_TYPES, AGENT_TYPES = (
    {"human", "humanmessage", "humanmessagechunk"},
    {"ai", "aimessage", "aimessagechunk"},
)
ROLE_DEFINED_TYPES = {"chat", "chatmessage", "chatmessagechunk"}
USER_ROLES, AGENT_ROLES = {"human", "user"}, {"agent", "assistant"}
MEDIA_BLOCKS = {"audio", "file", "image", "video"}


def a2a_role(message: dict[str, Any]) -> str | None:
    """ROLE_USER or ROLE_AGENT for a public message; None for system and tool
    messages, which never become anyone's words."""

    def label(value: Any) -> str:
        return value.lower().replace("_", "").replace("-", "") if isinstance(value, str) else ""

    kind, role = label(message.get("type")), label(message.get("role"))
    by_type = by_role = None
    if kind:
        if kind in USER_TYPES:
            by_type = "ROLE_USER"
        elif kind in AGENT_TYPES:
            by_type = "ROLE_AGENT"
        elif kind not in ROLE_DEFINED_TYPES:
            return None
    if role:
        if role in USER_ROLES:
            by_role = "ROLE_USER"
        elif role in AGENT_ROLES:
            by_role = "ROLE_AGENT"
        else:
            return None
    if by_type and by_role and by_type != by_role:
        return None
    return by_type or by_role


def content_parts(content: Any) -> list[dict[str, Any]]:
    """Message content as A2A parts: runs of text joined, media blocks as files."""
    if isinstance(content, str):
        return [{"kind": "text", "text": content}]
    if content is None:
        return []
    if not isinstance(content, list):
        return [{"kind": "text", "text": str(content)}]
    parts: list[dict[str, Any]] = []
    text: list[str] = []
    for block in content:
        if isinstance(block, str):
            text.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            text.append(str(block.get("text") or ""))
        elif isinstance(block, dict) and block.get("type") in MEDIA_BLOCKS:
            if text:
                parts.append({"kind": "text", "text": "".join(text)})
                text = []
            parts.append(file_part(block))
    if text:
        parts.append({"kind": "text", "text": "".join(text)})
    return parts


def file_part(block: dict[str, Any]) -> dict[str, Any]:
    file: dict[str, Any] = {}
    if block.get("url"):
        file["uri"] = block["url"]
    else:
        file["bytes"] = block.get("base64") or block.get("data")
    if block.get("mime_type"):
        file["mimeType"] = block["mime_type"]
    name = block.get("filename") or (block.get("extras") or {}).get("filename")
    if name:
        file["name"] = name
    return {"kind": "file", "file": file}


def has_content(parts: list[dict[str, Any]]) -> bool:
    return any(p.get("kind") in ("data", "file") or p.get("text") for p in parts)


def reply_parts(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The agent's reply in this turn: its last message with content after the
    user's last one; the values as text when the graph has no messages."""
    messages = result.get("messages")
    if not isinstance(messages, list) or not messages:
        return [{"kind": "text", "text": str(result)}]
    turn = current_turn(messages)
    for message in reversed(turn):
        if isinstance(message, dict) and a2a_role(message) == "ROLE_AGENT":
            parts = content_parts(message.get("content"))
            if has_content(parts):
                return parts
    return [{"kind": "text", "text": ""}]


def current_turn(messages: list[Any]) -> list[Any]:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and a2a_role(message) == "ROLE_USER":
            return messages[index + 1 :]
    return messages


def history(
    messages: list[Any],
    task_id: str,
    context_id: str,
    options: HistoryOptions,
    task_ids: dict[str, str],
    through_task: bool = False,
) -> list[dict[str, Any]]:
    """The context's public messages as A2A messages, each named by its task: a
    user message carrying a task's start id begins that task's messages.
    `through_task`: none after the task's own (the context as the task left it)."""
    current: str | None = None if options.scope == "task" else task_id
    found = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        start_id = ((message.get("additional_kwargs") or {}).get("a2a") or {}).get("task_start_id")
        if isinstance(start_id, str) and start_id:
            current = task_ids.get(start_id)
        role = a2a_role(message)
        if current is None or role is None:
            continue
        parts = content_parts(message.get("content", ""))
        if role == "ROLE_AGENT" and not has_content(parts):
            continue  # e.g. a message that only calls tools
        found.append(
            {
                "kind": "message",
                "role": role,
                "parts": parts or [{"kind": "text", "text": ""}],
                "messageId": message.get("id") or str(uuid.uuid4()),
                "taskId": current,
                "contextId": context_id,
            }
        )
    if options.scope == "task":
        found = [m for m in found if m["taskId"] == task_id]
    if through_task:
        ends = [index for index, m in enumerate(found) if m["taskId"] == task_id]
        found = found[: ends[-1] + 1] if ends else found
    if options.length is None:
        return found
    return found[-options.length :] if options.length else []


def content_text(content: Any) -> str:
    return "".join(p.get("text", "") for p in content_parts(content) if p.get("kind") == "text")
