"""A JSON-RPC call to an A2A agent, read from the request's body and checked as
LangGraph Platform checks it: the method (by its slash name or its v1.0 name),
its id and its params; the scope each method needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from waybill.gateway.protocols.a2a.shapes import spec_format
from waybill.gateway.protocols.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    RpcError,
)

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


@dataclass(frozen=True)
class A2ACall:
    """One JSON-RPC call to `/a2a/{assistant_id}`, read and checked."""

    rpc_id: Any
    method: str  # the v1.0 name
    params: dict[str, Any]
    spec_format: bool  # called by its slash name: answer in the spec's shapes

    def answer(self, result: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": self.rpc_id, "result": result}
        return spec_format(body) if self.spec_format else body

    def failure(self, error: RpcError) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": self.rpc_id, "error": error.body()}


def is_valid_id(rpc_id: Any) -> bool:
    return rpc_id is None or (
        isinstance(rpc_id, (str, int, float)) and not isinstance(rpc_id, bool)
    )


def read_call(message: Any) -> A2ACall | None:
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
        return A2ACall(rpc_id, method, params if isinstance(params, dict) else {}, spec)
    if rpc_id is not None and ("result" in message or "error" in message):
        return None
    if rpc_id is not None:
        raise RpcError(INVALID_REQUEST, "Invalid JSON-RPC request: missing 'method' field")
    raise RpcError(
        INVALID_REQUEST, "Invalid message format: must be a JSON-RPC request or notification"
    )
