"""Appends a run's frames to the journal in order, batching whatever piles up
while the previous `Append` is in flight, so the graph never waits on a round trip."""

from __future__ import annotations

import asyncio

from services.runner.fencing import RunFence
from waybill.v1 import journal_pb2, journal_pb2_grpc


class JournalSink:
    def __init__(
        self,
        journal: journal_pb2_grpc.JournalStub,
        run_id: str,
        epoch: int,
        fence: RunFence,
        timeout: float = 30.0,
    ) -> None:
        self.journal = journal
        self.timeout = timeout
        self.run_id = run_id
        self.epoch = epoch
        self.fence = fence
        self._buffer: list[journal_pb2.RunEvent] = []
        self._pump: asyncio.Task[None] | None = None

    def emit(self, event: str, data: bytes) -> None:
        self._buffer.append(journal_pb2.RunEvent(event=event, data=data))
        if self._pump is None or self._pump.done():
            if self._pump is not None:
                self._pump.result()  # surface a failed append instead of losing events
            self._pump = asyncio.create_task(self._send_all())

    async def _send_all(self) -> None:
        while self._buffer:
            batch, self._buffer = self._buffer, []
            self.fence.check("journal append")
            await self.journal.Append(
                journal_pb2.AppendRequest(run_id=self.run_id, epoch=self.epoch, events=batch),
                timeout=self.timeout,
            )

    async def drain(self) -> None:
        """Wait until every emitted event has been appended (raises if one failed)."""
        while self._pump is not None and (not self._pump.done() or self._buffer):
            if self._pump.done():
                self._pump.result()
                self._pump = asyncio.create_task(self._send_all())
            await self._pump
        if self._pump is not None:
            self._pump.result()

    async def flush(self) -> None:
        """Drain, then wait until the journal has stored everything durably."""
        await self.drain()
        await self.journal.Flush(journal_pb2.FlushRequest(run_id=self.run_id), timeout=self.timeout)

    async def close(self) -> None:
        self.fence.check("journal close")
        await self.journal.Close(
            journal_pb2.CloseRequest(run_id=self.run_id, epoch=self.epoch), timeout=self.timeout
        )
