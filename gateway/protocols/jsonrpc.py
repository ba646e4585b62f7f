"""JSON-RPC 2.0 over HTTP, the little that /mcp and /a2a share: reading a body,
answering with a result or an error, an assistant's schemas, and running an
assistant to its end as a stateless run (what an MCP tool call is)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from waybill.gateway.routes.assistants import get_assistant_schemas
from waybill.gateway.routes.run_results import final_values
from waybill.gateway.routes.stateless_runs import drop_temporary_thread, start_stateless_run
from waybill.gateway.routes.threads import peers_of
from waybill.gateway.run_schemas import RunCreate

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

NOT_PARSED = object()  # a body that is not JSON


class RpcError(Exception):
    """A JSON-RPC error object to answer with (HTTP 200, as JSON-RPC wants)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


async def parsed_body(request: Request) -> Any:
    """The request's JSON, or NOT_PARSED."""
    try:
        return json.loads(await request.body())
    except ValueError:  # UnicodeDecodeError is one too
        return NOT_PARSED


def plain_error(message: str, status_code: int) -> Response:
    """LangGraph Platform's `{"error": ...}` answer for a request that is not JSON-RPC at all."""
    return JSONResponse({"error": message}, status_code=status_code)


def result_response(rpc_id: Any, result: Any) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": rpc_id, "result": result})


def error_response(rpc_id: Any, error: RpcError) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": rpc_id, "error": error.body()})


def accepts(request: Request, media_type: str) -> bool:
    """Whether the Accept header allows `media_type` (`*/*` and `type/*` included)."""
    top = media_type.split("/", 1)[0]
    for media_range in request.headers.get("accept", "").split(","):
        candidate = media_range.split(";", 1)[0].strip().lower()
        if candidate in ("*/*", media_type, f"{top}/*"):
            return True
    return False


def run_body(fields: dict[str, Any]) -> RunCreate:
    """A run's body from protocol fields; a wrong shape is the caller's error."""
    try:
        return RunCreate.model_validate(fields)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()
        )
        raise RpcError(INVALID_PARAMS, f"Invalid run: {problems}") from None


async def wait_stateless(request: Request, body: RunCreate) -> Any:
    """Run an assistant on a temporary thread through StartRun (policy and the
    project's auth handlers included) and return its final values, or
    `{"__error__": ...}`: what `POST /runs/wait` answers."""
    peers = peers_of(request)
    run = await start_stateless_run(peers, body, request)
    result = await final_values(peers, run)
    await drop_temporary_thread(peers, run, body)
    return result


async def schemas_of(request: Request, assistant_id: str) -> dict[str, Any]:
    """The assistant's graph's schemas, as `GET /assistants/{id}/schemas` answers
    them (the project's `assistants.read` handler included)."""
    reply = await get_assistant_schemas(assistant_id, request)
    schemas: dict[str, Any] = json.loads(bytes(reply.body))
    return schemas


def require_scope(request: Request, scope: str) -> None:
    """A method's own scope: the route lets in any key, a method that runs or
    cancels something needs more (403, as the REST route would answer)."""
    if not request.state.principal.allows(scope):
        raise HTTPException(403, f"This API key lacks the '{scope}' scope.")


def refusal_message(error: HTTPException) -> str:
    return str(error.detail) if error.detail else f"HTTP {error.status_code}"
