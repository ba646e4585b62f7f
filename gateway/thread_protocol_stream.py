"""A thread's protocol event stream (`POST /threads/{tid}/stream/events`).

As on LangGraph Platform, each connection replays the thread's runs from the
first (oldest first, one after another, as they ran), then follows new ones for
as long as the client stays; its filter and `since` choose what is sent. The
events come from the journal (see thread_protocol.py), so any gateway replica
serves the same numbers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import grpc

from waybill.common import codec
from waybill.common.journal_reading import journal_batches
from waybill.gateway.sse import sse_frame
from waybill.gateway.thread_protocol import EventFilter, Numbering, RunEvents
from waybill.gateway.thread_runs import ThreadRuns
from waybill.v1 import admission_pb2, admission_pb2_grpc, common_pb2, journal_pb2_grpc

# How long a run's record may lag behind the end of its log.
FINAL_STATUS_SECONDS = 5.0
ACTIVE = (common_pb2.RUN_STATUS_PENDING, common_pb2.RUN_STATUS_RUNNING)


def protocol_frame(event: dict[str, Any]) -> bytes:
    """`event:` the method, `data:` the event, `id:` its seq, as the reference sends them."""
    return sse_frame(str(event["method"]), codec.dumps(event), event["seq"])


class ThreadProtocolStream:
    """One connection's events of one thread."""

    def __init__(
        self,
        admission: admission_pb2_grpc.AdmissionStub,
        journal: journal_pb2_grpc.JournalStub,
        thread_id: str,
        event_filter: EventFilter,
        since: int | None,
        poll_seconds: float,
    ) -> None:
        self.admission = admission
        # A run being rolled back is left out: its events are about to be undone.
        self.runs = ThreadRuns(admission, thread_id, poll_seconds, leave_out=codec.rolling_back)
        self.journal = journal
        self.thread_id = thread_id
        self.filter = event_filter
        self.since = since if since is not None else 0
        self.numbering = Numbering()

    async def frames(self) -> AsyncIterator[bytes]:
        """Every run's events in turn; the stream ends only if admission cannot list
        the thread's runs any more (the thread deleted)."""
        async for runs in self.runs.as_they_come(every_page_first=True, every_page_later=True):
            for run in runs:
                async for events in self._run_events(run):
                    chunk = self._wanted(events)
                    if chunk:
                        yield chunk

    def _wanted(self, events: Iterable[dict[str, Any]]) -> bytes:
        return b"".join(
            protocol_frame(event)
            for event in events
            if event["seq"] > self.since and self.filter.passes(event)
        )

    async def _run_events(self, run: common_pb2.Run) -> AsyncIterator[list[dict[str, Any]]]:
        """The run's protocol events, batch by batch, its end included. A run whose
        events are gone (expired) is told by its start and its status."""
        translated = RunEvents(run.run_id, run.graph_id or run.assistant_id, self.numbering)
        yield translated.started()
        try:
            async for batch in journal_batches(self.journal, run.run_id, 0):
                yield [
                    event
                    for item in batch
                    for event in translated.translate(item.event, item.seq, item.data)
                ]
        except grpc.aio.AioRpcError:
            pass
        yield translated.finished(await self._final_status(run))

    async def _final_status(self, run: common_pb2.Run) -> str | None:
        """The run's status once its log ended (its record is written just after);
        None for a run deleted meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FINAL_STATUS_SECONDS
        request = admission_pb2.GetRunRequest(thread_id=run.thread_id, run_id=run.run_id)
        while True:
            try:
                current = await self.admission.GetRun(request)
            except grpc.aio.AioRpcError:
                return None
            if current.status not in ACTIVE or loop.time() >= deadline:
                return codec.RUN_STATUS_NAMES.get(current.status, "success")
            await asyncio.sleep(0.1)
