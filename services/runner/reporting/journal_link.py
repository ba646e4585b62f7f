"""One long-lived `AppendStream` to the journal, shared by every run on this runner.

Each run's `FrameSink` queues its frames and asks the link for a turn; the
link's writer sends whatever that sink has queued as one batch. At most
`window` batches are unanswered at a time: the first frame goes alone and at
once, and while the journal works on what was sent, the next frames pile up
into the next batch (a burst goes together, a trickle goes frame by frame).
The default is one batch in flight (see bench/RESULTS.md for why).
Answers come back in send order and are matched to their sinks. If the stream
breaks, every batch in flight fails its run's sink, and the next batch opens a
new stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any, Protocol

import grpc

from waybill.v1 import journal_pb2, journal_pb2_grpc

log = logging.getLogger("waybill.runner.journal")


class JournalUnavailable(RuntimeError):
    """The append stream broke while a run's events were in flight."""


class TakesTurns(Protocol):
    """What the link needs of a run's sink (`frame_sink.FrameSink`): batches to
    send in turn, and where their answers go."""

    waiting_for_turn: bool  # the link's bookkeeping: queued for a turn already

    def take_batch(self) -> journal_pb2.AppendRequest | None: ...

    def answered(self, answer: journal_pb2.AppendResponse, count: int) -> None: ...

    def fail(self, error: BaseException) -> None: ...


class JournalLink:
    def __init__(self, journal: journal_pb2_grpc.JournalStub, window: int = 1) -> None:
        self.journal = journal
        self.window = window
        self._ready: asyncio.Queue[TakesTurns] = asyncio.Queue()
        self._in_flight: deque[tuple[TakesTurns, int]] = deque()
        self._answer = asyncio.Event()  # set whenever an answer frees a place
        self._task: asyncio.Task[None] | None = None

    def request_turn(self, sink: TakesTurns) -> None:
        """`sink` has frames to send; it gets one turn however often it asks."""
        if not sink.waiting_for_turn:
            sink.waiting_for_turn = True
            self._ready.put_nowait(sink)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._stream(), name="journal-append-stream")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _stream(self) -> None:
        call: Any = self.journal.AppendStream()
        reader = asyncio.create_task(self._read_answers(call))
        try:
            while True:
                sink = await self._ready.get()
                while len(self._in_flight) >= self.window:
                    self._answer.clear()
                    await self._answer.wait()
                sink.waiting_for_turn = False
                request = sink.take_batch()
                if request is None:
                    continue
                self._in_flight.append((sink, len(request.events)))
                await call.write(request)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as error:
            self._fail_in_flight(JournalUnavailable(f"the journal append stream broke: {error}"))
        finally:
            reader.cancel()
            call.cancel()

    async def _read_answers(self, call: Any) -> None:
        try:
            async for answer in call:
                sink, count = self._in_flight.popleft()
                self._answer.set()
                sink.answered(answer, count)
        except grpc.aio.AioRpcError as error:
            log.warning("journal append stream ended: %s", error.details())
            self._fail_in_flight(JournalUnavailable(f"the journal append stream broke: {error}"))
            if self._task is not None:
                self._task.cancel()  # the writer opens a new stream on the next turn

    def _fail_in_flight(self, error: Exception) -> None:
        while self._in_flight:
            sink, _count = self._in_flight.popleft()
            sink.fail(error)
        while not self._ready.empty():
            sink = self._ready.get_nowait()
            sink.waiting_for_turn = False
            sink.fail(error)
