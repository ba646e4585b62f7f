"""The agent card: an assistant as an A2A agent with one skill, itself (served by
the card routes in a2a.py)."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from waybill.common import codec
from waybill.gateway.protocols.a2a.shapes import HISTORY_SCOPE_HEADER
from waybill.gateway.protocols.a2a.turn import assistant_of
from waybill.gateway.protocols.jsonrpc import INVALID_PARAMS, RpcError, schemas_of

HISTORY_SCOPE_EXTENSION = "https://langchain.com/a2a/extensions/history-scope/v1"
DEFAULT_MODES = ("application/json", "text/plain")


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
