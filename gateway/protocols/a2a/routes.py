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
the Platform. Not served yet (a JSON-RPC error says so): `ListTasks`, the
extended card, continuing an open task by `taskId`, resuming an interrupt, A2UI.

The agent card: `GET /a2a/{id}`, `/a2a/{id}/.well-known/agent-card.json` (and
`agent.json`), and `/.well-known/agent-card.json?assistant_id=...`.

This module holds the routes and the JSON-RPC dispatch. The call's reading is in
call.py, a turn (message in, run started) in turn.py, `message/send` and
`message/stream` in messages.py, `tasks/get` and `tasks/cancel` in tasks.py, the
agent card in card.py, the shapes in shapes.py."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from waybill.common import codec
from waybill.gateway.protocols.a2a.call import METHOD_SCOPES, A2ACall, is_valid_id, read_call
from waybill.gateway.protocols.a2a.card import card_error, card_response
from waybill.gateway.protocols.a2a.messages import send_message, stream_message
from waybill.gateway.protocols.a2a.shapes import UNSUPPORTED_OPERATION
from waybill.gateway.protocols.a2a.tasks import cancel_task, get_task
from waybill.gateway.protocols.jsonrpc import (
    INVALID_PARAMS,
    NOT_PARSED,
    PARSE_ERROR,
    RpcError,
    accepts,
    error_response,
    parsed_body,
    plain_error,
    require_scope,
)
from waybill.gateway.response_schemas import no_body, protocol_error_responses

router = APIRouter(tags=["a2a"], responses=protocol_error_responses())


# ---- the JSON-RPC endpoint ---------------------------------------------------------


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


async def dispatch(request: Request, assistant_id: str, rpc: A2ACall) -> dict[str, Any]:
    if rpc.method == "SendMessage":
        return await send_message(request, assistant_id, rpc.params)
    if rpc.method == "GetTask":
        return await get_task(request, assistant_id, rpc.params)
    if rpc.method == "CancelTask":
        return await cancel_task(request, assistant_id, rpc.params)
    raise RpcError(UNSUPPORTED_OPERATION, f"{rpc.method} is not supported by this server yet")


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
