"""/mcp: the Model Context Protocol's streamable HTTP transport, as LangGraph
Platform serves it (`langgraph_api/api/mcp`): stateless, JSON answers only (no
SSE, no sessions), every assistant a tool. Calling a tool is a stateless run of
its assistant, through StartRun like `POST /runs/wait`, and answers the run's
final values as text (Python's `repr`, as the Platform does)."""

from __future__ import annotations

import asyncio
import logging
import re
from importlib.metadata import version
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response

from waybill.gateway.protocols.jsonrpc import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    NOT_PARSED,
    RpcError,
    error_response,
    parsed_body,
    plain_error,
    refusal_message,
    require_scope,
    result_response,
    run_body,
    schemas_of,
    wait_stateless,
)
from waybill.gateway.response_schemas import no_body, protocol_error_responses
from waybill.gateway.routes.assistants import search_assistants
from waybill.gateway.schemas import AssistantSearch

router = APIRouter(tags=["mcp"], responses=protocol_error_responses())

log = logging.getLogger("waybill.gateway.mcp")

SUPPORTED_PROTOCOL_VERSIONS = frozenset(("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"))
LATEST_PROTOCOL_VERSION = "2025-11-25"
PAGE_SIZE = 100  # tools/list pages through the assistants this many at a time
MAX_ASSISTANTS = 1000  # tools/call looks for its tool's assistant among this many

TOOL_ANNOTATIONS = {
    "readOnlyHint": False,
    "destructiveHint": False,
    "idempotentHint": False,
    "openWorldHint": True,
}


@router.get("/mcp", status_code=405, response_class=Response)
async def mcp_get() -> Response:
    # No server-initiated stream: the Platform answers 405 too.
    return Response(status_code=405)


@router.delete(
    "/mcp",
    status_code=404,
    response_class=Response,
    responses=no_body(404, "Stateless: no session to end"),
)
async def mcp_delete() -> Response:
    # Stateless: there is no session to end (the Platform answers 404).
    return Response(status_code=404)


@router.post(
    "/mcp", responses=no_body(202, "A JSON-RPC response or notification: nothing to answer")
)
async def mcp_post(request: Request) -> Response:
    message = await parsed_body(request)
    if message is NOT_PARSED:
        return plain_error("Invalid JSON", 400)
    accept = request.headers.get("accept", "")
    if "application/json" not in accept and "text/event-stream" not in accept:
        return plain_error("Accept header must include application/json or text/event-stream", 400)
    if not isinstance(message, dict):
        return plain_error("Invalid message format.", 400)
    if message.get("jsonrpc") != "2.0":
        return plain_error("Invalid JSON-RPC message. Missing or invalid jsonrpc version.", 400)
    rpc_id, method = message.get("id"), message.get("method")
    if rpc_id is not None and method:
        return await answer(request, rpc_id, method, message.get("params", {}))
    if rpc_id is not None or method:
        return Response(status_code=202)  # a response or a notification: nothing to answer
    return plain_error(
        "Invalid message format. A message is to be either a JSON-RPC request, response, "
        "or notification.Please see the Messages section of the Streamable HTTP RFC "
        "for more information.",
        400,
    )


async def answer(request: Request, rpc_id: Any, method: Any, params: Any) -> Response:
    try:
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: must be an object")
        return result_response(rpc_id, await dispatch(request, method, params))
    except RpcError as error:
        return error_response(rpc_id, error)


async def dispatch(request: Request, method: Any, params: dict[str, Any]) -> dict[str, Any]:
    if method == "initialize":
        return initialize(params)
    if method == "ping":
        return {}
    if method == "tools/list":
        return await list_tools(request, params)
    if method == "tools/call":
        return await call_tool(request, params)
    raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")


def initialize(params: dict[str, Any]) -> dict[str, Any]:
    """The client's protocol version if it is one we speak, else our latest."""
    requested = params.get("protocolVersion", LATEST_PROTOCOL_VERSION)
    negotiated = requested if requested in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION
    return {
        "protocolVersion": negotiated,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": "LangGraph", "version": version("waybill")},
    }


# ---- tools/list -------------------------------------------------------------------


async def list_tools(request: Request, params: dict[str, Any]) -> dict[str, Any]:
    cursor = page_cursor(params.get("cursor"))
    assistants = await visible_assistants(request, PAGE_SIZE, cursor)
    named = unique_tool_names(assistants)
    tools = await asyncio.gather(*(tool_of(request, a, name) for a, name in named))
    result: dict[str, Any] = {"tools": [tool for tool in tools if tool is not None]}
    if len(assistants) == PAGE_SIZE:
        result["nextCursor"] = cursor + PAGE_SIZE
    return result


def page_cursor(raw: Any) -> int:
    """The Platform's cursor is an offset; anything else starts from the beginning."""
    try:
        return max(0, int(raw or 0))
    except (TypeError, ValueError):
        return 0


async def visible_assistants(request: Request, limit: int, offset: int) -> list[dict[str, Any]]:
    """The caller's assistants, as `POST /assistants/search` shows them (the
    project's `assistants.search` handler included)."""
    search = AssistantSearch(limit=limit, offset=offset)
    return await search_assistants(search, request, Response())


def unique_tool_names(assistants: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """Each assistant with its tool name; a name taken already is skipped."""
    seen: set[str] = set()
    named = []
    for assistant in assistants:
        name = tool_name(assistant["name"])
        if name in seen:
            log.warning("MCP: two assistants are named %r; the tool is the first", name)
            continue
        seen.add(name)
        named.append((assistant, name))
    return named


async def tool_of(request: Request, assistant: dict[str, Any], name: str) -> dict[str, Any] | None:
    """An assistant as an MCP tool; None (left out) when its input schema cannot be had."""
    try:
        schemas = await schemas_of(request, assistant["assistant_id"])
    except HTTPException as error:
        log.warning("MCP: no schema for assistant %s: %s", assistant["assistant_id"], error.detail)
        return None
    input_schema = schemas.get("input_schema")
    if input_schema is None:
        return None
    simplify_schema(input_schema)
    input_schema.setdefault("type", "object")  # MCP wants an object schema
    return {
        "name": name,
        "title": assistant["name"],
        "description": assistant.get("description")
        or f"Tool based on the {assistant['name']} assistant",
        "inputSchema": input_schema,
        "annotations": TOOL_ANNOTATIONS,
    }


# MCP tool names: ASCII letters, digits, `_`, `-`, `.`; 1 to 128 of them.
INVALID_NAME_CHARACTERS = re.compile(r"[^a-zA-Z0-9_\-.]")


def tool_name(assistant_name: str) -> str:
    name = re.sub(r"\s+", "_", assistant_name.strip())
    return INVALID_NAME_CHARACTERS.sub("", name)[:128]


LANGCHAIN_MESSAGE_TYPES = {
    f"{kind}{suffix}"
    for kind in ("AI", "Human", "Chat", "System", "Function", "Tool")
    for suffix in ("Message", "MessageChunk")
}
LANGCHAIN_DEFINITIONS = LANGCHAIN_MESSAGE_TYPES | {
    "ToolCall",
    "ToolCallChunk",
    "InvalidToolCall",
    "UsageMetadata",
    "InputTokenDetails",
    "OutputTokenDetails",
}


def simplify_schema(schema: dict[str, Any]) -> None:
    """A list of LangChain messages becomes one string, the user's message, for a
    model to fill in (as the Platform does); their definitions go."""
    definitions = schema.get("$defs")
    if not definitions or not set(definitions) & LANGCHAIN_MESSAGE_TYPES:
        return
    for name in LANGCHAIN_DEFINITIONS:
        definitions.pop(name, None)
    if not definitions:
        del schema["$defs"]
    properties = schema.get("properties", {})
    for key, prop in properties.items():
        if is_message_list(prop):
            properties[key] = {
                "type": "string",
                "title": prop.get("title", key),
                "description": "The user message to send to the agent.",
            }


def is_message_list(prop: dict[str, Any]) -> bool:
    if prop.get("type") != "array":
        return False
    items = prop.get("items", {})
    for candidate in items.get("oneOf") or items.get("anyOf") or []:
        ref = candidate.get("$ref", "")
        if ref.startswith("#/$defs/") and ref.removeprefix("#/$defs/") in LANGCHAIN_MESSAGE_TYPES:
            return True
    return False


# ---- tools/call -------------------------------------------------------------------


async def call_tool(request: Request, params: dict[str, Any]) -> dict[str, Any]:
    name = params.get("name")
    if not name:
        raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")
    require_scope(request, "runs:create")
    assistant_id = await tool_assistant_id(request, name)
    body = run_body(
        {
            "assistant_id": assistant_id,
            "input": params.get("arguments", {}),
            "context": params.get("context"),
        }
    )
    try:
        value = await wait_stateless(request, body)
    except HTTPException as error:
        if error.status_code in (401, 403) or error.status_code >= 500:
            raise
        raise RpcError(INVALID_PARAMS, refusal_message(error)) from None
    if isinstance(value, dict) and "__error__" in value:
        failure = value["__error__"] or {}
        return {"isError": True, "content": [{"type": "text", "text": str(failure.get("error"))}]}
    return {"content": [{"type": "text", "text": repr(value)}]}


async def tool_assistant_id(request: Request, name: str) -> str:
    matching = [
        assistant
        for assistant in await visible_assistants(request, MAX_ASSISTANTS, 0)
        if tool_name(assistant["name"]) == name
    ]
    if not matching:
        raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")
    if len(matching) > 1:
        raise RpcError(INVALID_PARAMS, "Multiple tools found with the same name.")
    return str(matching[0]["assistant_id"])
