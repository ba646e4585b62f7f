"""The v3 thread streaming protocol that `langgraph-sdk`'s `threads.stream(...)` speaks:

- `POST /threads/{tid}/commands`: one JSON command `{"id", "method", "params"}`,
  answered `{"type": "success", "id", "result", "meta"}` or `{"type": "error",
  "id", "error", "message"}` (a protocol error is status 200, as on LangGraph
  Platform; a body that is no command at all is 400). `run.start` starts a run
  through `start_run` (policy and the project's auth apply), creating the thread
  if it does not exist; `input.respond` resumes the thread's pending interrupts.
- `POST /threads/{tid}/stream/events`: the thread's events as SSE (thread_protocol_stream.py),
  for the channels, namespaces and depth the body names, after its `since`.
- `WebSocket /threads/{tid}/stream/events`: refused (the SSE transport is the one
  Waybill serves).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from fastapi import APIRouter, HTTPException, Request, Response, WebSocket
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from waybill.common import codec
from waybill.gateway.peers import call
from waybill.gateway.project_auth import authorize
from waybill.gateway.response_schemas import event_stream, protocol_error_responses
from waybill.gateway.routes.run_admission import start_run
from waybill.gateway.routes.threads import peers_of
from waybill.gateway.run_schemas import RunCreate
from waybill.gateway.streams import sse_response
from waybill.gateway.thread_protocol import RUN_STREAM_MODES, EventFilter, is_channel
from waybill.gateway.thread_protocol_stream import ThreadProtocolStream
from waybill.v1 import admission_pb2

router = APIRouter(tags=["threads"], responses=protocol_error_responses())
websocket_router = APIRouter()

MULTITASK_STRATEGIES = ("reject", "interrupt", "rollback", "enqueue")
WEBSOCKET_REFUSAL = (
    "Waybill serves the thread streaming protocol over SSE only: "
    "use threads.stream(..., transport='sse')."
)


class ProtocolError(Exception):
    """A command refused: answered as the protocol's error envelope."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


Command = dict[str, Any]
Handler = Callable[[Request, str, dict[str, Any]], Awaitable[dict[str, Any]]]


# ---- POST /threads/{tid}/commands ------------------------------------------------------


@router.post("/threads/{thread_id}/commands")
async def thread_command(thread_id: UUID, request: Request) -> Response:
    command = await read_command(request)
    if isinstance(command, Response):
        return command
    handler = HANDLERS.get(command["method"])
    try:
        if handler is None:
            raise ProtocolError("unknown_command", f"Unknown protocol command: {command['method']}")
        result = await handler(request, str(thread_id), params_of(command))
    except ProtocolError as refused:
        return JSONResponse(error_envelope(command["id"], refused.code, refused.message))
    return JSONResponse({"type": "success", "id": command["id"], "result": result, "meta": {}})


async def read_command(request: Request) -> Command | Response:
    """The command, or the 400 for a body that is not one."""
    try:
        payload = codec.loads(await request.body())
    except ValueError:
        return JSONResponse({"detail": "Invalid JSON body"}, status_code=400)
    command_id = payload.get("id") if isinstance(payload, dict) else None
    if (
        not isinstance(payload, dict)
        or not isinstance(command_id, int)
        or isinstance(command_id, bool)
        or not isinstance(payload.get("method"), str)
    ):
        message = "Protocol commands must include an integer id and string method."
        return JSONResponse(error_envelope(command_id, "invalid_argument", message), 400)
    return payload


def params_of(command: Command) -> dict[str, Any]:
    params = command.get("params")
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise ProtocolError("invalid_argument", "params must be an object.")
    return params


def error_envelope(command_id: Any, code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "id": command_id, "error": code, "message": message}


def refusal(error: HTTPException) -> ProtocolError:
    """A refusal of the REST layer (admission, policy, auth) as a protocol error."""
    code = {400: "invalid_argument", 403: "permission_denied", 422: "invalid_argument"}
    return ProtocolError(code.get(error.status_code, "unknown_error"), str(error.detail))


# ---- run.start ----------------------------------------------------------------------------


async def run_start(request: Request, thread_id: str, params: dict[str, Any]) -> dict[str, Any]:
    """A run on the thread, which is created if it does not exist (as LangGraph
    Platform does: the SDK mints the thread id and sends nothing else). On a thread
    paused by an interrupt, the input is the answer (`Command(resume=input)`)."""
    assistant_id = params.get("assistant_id")
    if not isinstance(assistant_id, str) or not assistant_id:
        raise ProtocolError("invalid_argument", "run.start requires an assistant_id.")
    given = params.get("input")
    resumes = given is not None and bool(await interrupts_if_any(request, thread_id))
    body = protocol_run(
        assistant_id=assistant_id,
        input=None if resumes else given,
        command={"resume": given} if resumes else None,
        config=params.get("config"),
        metadata=params.get("metadata"),
        multitask_strategy=multitask_strategy(params),
        if_not_exists="create",
    )
    return {"run_id": await started_run_id(request, thread_id, body)}


async def interrupts_if_any(request: Request, thread_id: str) -> set[str]:
    """The thread's pending interrupts (none for a thread not made yet): an input
    given while some wait answers them, as the reference reads `run.start`."""
    try:
        return await pending_interrupt_ids(request, thread_id)
    except ProtocolError as refused:
        if refused.code == "no_such_run":
            return set()
        raise


def multitask_strategy(params: dict[str, Any]) -> str:
    """The SDK's `multitaskStrategy` when it names one; else `enqueue`, as the reference."""
    strategy = params.get("multitaskStrategy")
    return strategy if strategy in MULTITASK_STRATEGIES else "enqueue"


def protocol_run(**fields: Any) -> RunCreate:
    """A protocol run: every channel's stream modes, subgraphs included."""
    try:
        return RunCreate.model_validate(
            {**fields, "stream_mode": RUN_STREAM_MODES, "stream_subgraphs": True}
        )
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}"
            for problem in error.errors()
        )
        raise ProtocolError("invalid_argument", problems) from None


async def started_run_id(request: Request, thread_id: str, body: RunCreate) -> str:
    try:
        run = await start_run(peers_of(request), thread_id, body, request)
    except HTTPException as refused:
        raise refusal(refused) from None
    return run.run_id


# ---- input.respond ----------------------------------------------------------------------


async def input_respond(request: Request, thread_id: str, params: dict[str, Any]) -> dict[str, Any]:
    """Resume the thread's pending interrupts (one, or a batch of `responses`) in
    one run of the thread's assistant, as `Command(resume={id: response})`."""
    answers = respond_entries(params)
    pending = await pending_interrupt_ids(request, thread_id)
    for interrupt_id in answers:
        if interrupt_id not in pending:
            raise ProtocolError(
                "no_such_interrupt", f"Unknown or already-consumed interrupt: {interrupt_id}"
            )
    command: dict[str, Any] = {"resume": answers}
    for key in ("update", "goto"):
        if params.get(key) is not None:
            command[key] = params[key]
    body = protocol_run(
        assistant_id=await latest_assistant(request, thread_id),
        command=command,
        config=params.get("config"),
        metadata=params.get("metadata"),
    )
    await started_run_id(request, thread_id, body)
    return {}


def respond_entries(params: dict[str, Any]) -> dict[str, Any]:
    """`{interrupt_id: response}` from the one-answer or the batch form."""
    entries = params.get("responses")
    if entries is None:
        entries = [params]
    elif not isinstance(entries, list) or not entries:
        raise ProtocolError("invalid_argument", "input.respond requires at least one response.")
    answers: dict[str, Any] = {}
    for entry in entries:
        interrupt_id = entry.get("interrupt_id") if isinstance(entry, dict) else None
        if not isinstance(interrupt_id, str):
            raise ProtocolError("invalid_argument", "input.respond requires an interrupt_id.")
        namespace = entry.get("namespace", [])
        if not isinstance(namespace, list) or not all(isinstance(s, str) for s in namespace):
            raise ProtocolError(
                "invalid_argument", "input.respond requires namespace to be a list of strings."
            )
        answers[interrupt_id] = entry.get("response")
    return answers


async def pending_interrupt_ids(request: Request, thread_id: str) -> set[str]:
    """The ids of the interrupts the thread's record holds (kept with its status)."""
    try:
        await authorize(request, "threads", "read", {"thread_id": thread_id})
        thread = await call(
            peers_of(request).admission.GetThread(
                admission_pb2.GetThreadRequest(thread_id=thread_id)
            )
        )
    except HTTPException as refused:
        if refused.status_code == 404:  # no run ever made it: none to answer
            raise ProtocolError("no_such_run", str(refused.detail)) from None
        raise refusal(refused) from None
    interrupts = codec.thread_to_dict(thread)["interrupts"]
    return {
        entry["id"]
        for entries in interrupts.values()
        if isinstance(entries, list)
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("id"), str)
    }


async def latest_assistant(request: Request, thread_id: str) -> str:
    """The assistant of the thread's last run: the one its interrupt belongs to."""
    reply = await call(
        peers_of(request).admission.ListRuns(
            admission_pb2.ListRunsRequest(thread_id=thread_id, limit=1)
        )
    )
    if not reply.runs:
        raise ProtocolError("no_such_run", "No interrupted run is bound to this thread.")
    return reply.runs[0].assistant_id


HANDLERS: dict[str, Handler] = {"run.start": run_start, "input.respond": input_respond}


# ---- POST /threads/{tid}/stream/events ---------------------------------------------------


@router.post(
    "/threads/{thread_id}/stream/events",
    response_class=Response,
    responses=event_stream("The thread's protocol events, as Server-Sent Events"),
)
async def thread_events(thread_id: UUID, request: Request) -> Response:
    try:
        body = codec.loads(await request.body())
    except ValueError:
        raise HTTPException(400, "Invalid JSON body") from None
    if not isinstance(body, dict):
        raise HTTPException(400, "The body must be an object with `channels`.")
    event_filter = read_filter(body)
    since = read_since(body)
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    peers = peers_of(request)
    await call(peers.admission.GetThread(admission_pb2.GetThreadRequest(thread_id=str(thread_id))))
    settings = request.app.state.settings
    events = ThreadProtocolStream(
        peers.admission,
        peers.journal,
        str(thread_id),
        event_filter,
        since,
        settings.thread_stream_poll_seconds,
    )
    return sse_response(
        events.frames(), {}, settings.sse_heartbeat_seconds, settings.stream_drain_seconds
    )


def read_filter(body: dict[str, Any]) -> EventFilter:
    """The body's filter; unknown channels are a 400, as the reference answers them
    (a stream that could never send anything would only hang)."""
    channels = body.get("channels")
    if not isinstance(channels, list) or not channels:
        raise HTTPException(400, "channels is required and must be a non-empty array")
    unknown = [
        channel if isinstance(channel, str) else repr(channel)
        for channel in channels
        if not is_channel(channel)
    ]
    if unknown:
        raise HTTPException(
            400,
            f"channels contains unsupported entries: {', '.join(unknown[:5])}. Allowed: values, "
            "updates, messages, tools, custom, lifecycle, input, tasks, checkpoints, or any "
            "`custom:<name>`.",
        )
    return EventFilter(frozenset(channels), read_namespaces(body), read_depth(body))


def read_namespaces(body: dict[str, Any]) -> tuple[tuple[str, ...], ...] | None:
    """Only lists of strings count (others are left out, as the reference does)."""
    namespaces = body.get("namespaces")
    if not isinstance(namespaces, list):
        return None
    kept = tuple(
        tuple(namespace)
        for namespace in namespaces
        if isinstance(namespace, list) and all(isinstance(part, str) for part in namespace)
    )
    return kept or None


def read_depth(body: dict[str, Any]) -> int | None:
    depth = body.get("depth")
    if isinstance(depth, int) and not isinstance(depth, bool) and depth >= 0:
        return depth
    return None  # no limit, as the reference reads anything else (`false` included)


def read_since(body: dict[str, Any]) -> int | None:
    since = body.get("since")
    if since is None:
        return None
    if not isinstance(since, int) or isinstance(since, bool) or since < 0:
        raise HTTPException(400, "since must be a non-negative integer (an event's seq)")
    return since


# ---- WebSocket /threads/{tid}/stream/events ----------------------------------------------


@websocket_router.websocket("/threads/{thread_id}/stream/events")
async def refuse_websocket(websocket: WebSocket) -> None:
    """Refused before the upgrade, with a body saying why where the server can send
    one (the SDK reads a 4xx as final, and does not retry)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(
            JSONResponse({"detail": WEBSOCKET_REFUSAL}, status_code=400)
        )
        return
    await websocket.close(code=1008, reason=WEBSOCKET_REFUSAL)
