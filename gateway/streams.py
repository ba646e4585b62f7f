"""Journal events -> LangGraph Platform's SSE wire format.

`event: <name>`, `data: <json>`, `id: <seq>` for every event, `metadata` (seq 0)
included; no terminator event: the response simply ends after the last frame.
The journal's end marker never reaches the client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

import anyio
import grpc
from fastapi import HTTPException
from sse_starlette import EventSourceResponse, ServerSentEvent

from waybill.common import codec
from waybill.common.errors import http_status_for
from waybill.common.journal_reading import EXPIRED_KEY, journal_batches, subscribed_batches
from waybill.gateway.sse import sse_frame
from waybill.v1 import journal_pb2, journal_pb2_grpc

# Event ids (journal sequence numbers) travel as protobuf int64.
INT64_MAX = 2**63 - 1


def encode(event: journal_pb2.RunEvent) -> bytes:
    return sse_frame(event.event, event.data, event.seq)


def stream_mode_matches(event: str, modes: Collection[str]) -> bool:
    """Whether a join asking for `modes` gets `event`, as LangGraph Platform filters:
    no modes means every event; `messages` (or `messages-tuple`) takes every
    `messages/...` event; a subgraph's `mode|namespace` goes with its mode. Nothing
    else passes (not `metadata`, not `error`) unless asked for by name."""
    if not modes or event in modes:
        return True
    if event.startswith("messages") and ("messages" in modes or "messages-tuple" in modes):
        return True
    base, bar, _ = event.partition("|")
    return bool(bar) and base in modes


async def opened_sse_frames(
    journal: journal_pb2_grpc.JournalStub,
    run_id: str,
    from_seq: int,
    live_only: bool,
    modes: Collection[str] = (),
) -> AsyncIterator[bytes]:
    """`sse_frames` of a log known to be readable: a deleted run is 404 and one
    whose events expired is 410, answered before the stream starts. With `modes`,
    only the events `stream_mode_matches` lets through (each keeps its own id)."""
    request = journal_pb2.SubscribeRequest(run_id=run_id, from_seq=from_seq, live_only=live_only)
    call = journal.Subscribe(request)
    await call.initial_metadata()  # sent once the journal has checked the log
    if call.done():
        code = await call.code()
        if code != grpc.StatusCode.OK:
            details = await call.details()
            trailing = await call.trailing_metadata()
            if says_expired(trailing):
                raise HTTPException(410, details)
            raise HTTPException(http_status_for(code, details), details)
    return _frames(subscribed_batches(call), modes)


async def _frames(
    batches: AsyncIterator[Sequence[journal_pb2.RunEvent]], modes: Collection[str] = ()
) -> AsyncIterator[bytes]:
    try:
        async for batch in batches:
            wanted = [event for event in batch if stream_mode_matches(event.event, modes)]
            if wanted:
                yield b"".join(encode(event) for event in wanted)
    except grpc.aio.AioRpcError as failure:
        if not expired(failure):
            raise
        # Swept while being replayed: the response has begun, so it simply ends
        # (cleanly, not with a broken connection); the next request is told 410.


def expired(failure: grpc.aio.AioRpcError) -> bool:
    """Whether the journal refused because the run's events expired."""
    return says_expired(failure.trailing_metadata())


def says_expired(trailing: Any) -> bool:
    return any(key == EXPIRED_KEY for key, _ in trailing or ())


async def journal_events(
    journal: journal_pb2_grpc.JournalStub, run_id: str, from_seq: int = 0, live_only: bool = False
) -> AsyncIterator[journal_pb2.RunEvent]:
    async for batch in journal_batches(journal, run_id, from_seq, live_only):
        for event in batch:
            yield event


async def sse_frames(
    journal: journal_pb2_grpc.JournalStub, run_id: str, from_seq: int = 0, live_only: bool = False
) -> AsyncIterator[bytes]:
    # A burst of events is written to the socket as one chunk.
    async for batch in journal_batches(journal, run_id, from_seq, live_only):
        yield b"".join(encode(event) for event in batch)


def sse_response(
    frames: AsyncIterator[bytes],
    headers: Mapping[str, str],
    heartbeat_seconds: float,
    drain_seconds: float = 0.0,
) -> EventSourceResponse:
    """On SIGTERM (uvicorn's shutdown, seen by sse-starlette) an open stream goes
    on for `drain_seconds` (a run about to end completes it), then ends cleanly
    between two events, as LangGraph Platform's streams end on a restart: the
    client resumes with `Last-Event-ID` through another gateway (the SDK does,
    following the `Location` header, once it sees the run still going)."""
    shutdown = anyio.Event()
    return EventSourceResponse(
        until_drained(frames, shutdown, drain_seconds),
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no", **headers},
        ping=heartbeat_seconds,
        ping_message_factory=lambda: ServerSentEvent(comment="heartbeat"),
        shutdown_event=shutdown,
        # A backstop only: the stream ends itself after drain_seconds.
        shutdown_grace_period=drain_seconds + DRAIN_BACKSTOP_SECONDS,
    )


# How long after its own drain a stream that failed to end is cut (abruptly).
DRAIN_BACKSTOP_SECONDS = 2.0


async def until_drained(
    frames: AsyncIterator[bytes], shutdown: anyio.Event, drain_seconds: float
) -> AsyncIterator[bytes]:
    """`frames` until they end, or until `drain_seconds` after `shutdown` is set."""
    loop = asyncio.get_running_loop()
    iterator = aiter(frames)
    pending: asyncio.Future[bytes] | None = None
    stopping = asyncio.ensure_future(shutdown.wait())
    stop_at: float | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            waiting: set[asyncio.Future[Any]] = {pending}
            if stop_at is None:
                waiting.add(stopping)
            timeout = None if stop_at is None else max(0.0, stop_at - loop.time())
            done, _ = await asyncio.wait(waiting, timeout=timeout, return_when="FIRST_COMPLETED")
            if pending in done:
                try:
                    chunk = pending.result()
                except StopAsyncIteration:
                    return
                pending = None
                yield chunk
            elif stop_at is None and stopping in done:
                stop_at = loop.time() + drain_seconds
            else:
                return  # drained: end between two events
    finally:
        stopping.cancel()
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()


async def wait_for_end(journal: journal_pb2_grpc.JournalStub, run_id: str) -> dict[str, Any] | None:
    """Follow a run's log to its end; return its `error` payload, if it failed."""
    error: dict[str, Any] | None = None
    try:
        async for event in journal_events(journal, run_id):
            if event.event == "error":
                error = codec.loads(event.data)
    except grpc.aio.AioRpcError as failure:
        if expired(failure):
            return None  # expired long after the run ended; its state is in the thread
        return {"error": "StreamError", "message": failure.details() or "journal unavailable"}
    return error


def resume_point(last_event_id: str | None) -> tuple[int, bool]:
    """(from_seq, live_only) for a join. `-1` replays everything; no header follows live."""
    if last_event_id is None or last_event_id.strip() == "":
        return 0, True
    try:
        last = int(last_event_id)
    except ValueError:
        return 0, True
    if last >= INT64_MAX:
        raise HTTPException(422, f"Last-Event-ID {last_event_id[:40]!r} is past any event's id.")
    return max(0, last + 1), False
