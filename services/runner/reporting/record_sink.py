"""Sends a run's typed records (common/run_records.py) to the journal's
`AppendRecords`, batching whatever piles up while a call is in flight.

Unlike the frames' `FrameSink`, it may be fed from any thread (a sync node's
callbacks run in a worker thread) and it never raises where it is fed (inside a
LangChain callback an error would be swallowed): a failed append is raised by
`drain`, which the run awaits before it reports its end.

Records are for audit, not for the live stream, so a batch lingers
(`linger_seconds`) before it is sent: the run's first model call then costs no
RPC on the way to its first token, a short run sends one batch at its end, and a
busy run a few large ones instead of one call per callback. A tool starting
ends the wait (it may run for long, and who watches the run's records should
see it running); `drain` sends at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from waybill.common import codec
from waybill.services.runner.persistence.fencing import RunFence
from waybill.services.runner.run.outages import patiently
from waybill.v1 import journal_pb2, journal_pb2_grpc

# Records sent without lingering: a tool call may take minutes.
SENT_AT_ONCE = frozenset({"tool_start"})


class RecordSink:
    def __init__(
        self,
        journal: journal_pb2_grpc.JournalStub,
        run_id: str,
        epoch: int,
        fence: RunFence,
        timeout: float = 30.0,
        linger_seconds: float = 0.0,
        outage_seconds: float = 60.0,
    ) -> None:
        self.journal = journal
        self.run_id = run_id
        self.epoch = epoch
        self.fence = fence
        self.timeout = timeout
        self.linger_seconds = linger_seconds
        self.outage_seconds = outage_seconds  # how long the journal may be away
        self._send_now = asyncio.Event()  # set by `drain`: stop lingering
        self._hurry = asyncio.Event()  # set by a record sent at once: this batch goes now
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._buffer: list[journal_pb2.RunRecord] = []
        self._pump: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None

    def emit(self, record_type: str, data: dict[str, Any]) -> None:
        record = journal_pb2.RunRecord(
            type=record_type, data=codec.dumps(data), created_at=codec.iso(codec.now_utc())
        )
        if threading.get_ident() == self._loop_thread:
            self._add(record)
        else:
            self._loop.call_soon_threadsafe(self._add, record)

    def _add(self, record: journal_pb2.RunRecord) -> None:
        self._buffer.append(record)
        if record.type in SENT_AT_ONCE:
            self._hurry.set()
        if self._pump is None or self._pump.done():
            self._settle(self._pump)
            self._pump = asyncio.create_task(self._send_all(), name=f"records-{self.run_id}")

    def _settle(self, pump: asyncio.Task[None] | None) -> None:
        """Keep the first failure of a finished pump for `drain` to raise."""
        if pump is None or not pump.done() or pump.cancelled():
            return
        error = pump.exception()
        if error is not None and self._failure is None:
            self._failure = error

    async def _send_all(self) -> None:
        if self.linger_seconds > 0 and not self._send_now.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._hurry.wait(), self.linger_seconds)
        self._hurry.clear()
        while self._buffer:
            batch, self._buffer = self._buffer, []
            self.fence.check("journal records")
            await self._append(
                journal_pb2.AppendRecordsRequest(
                    run_id=self.run_id, epoch=self.epoch, records=batch
                )
            )

    async def _append(self, request: journal_pb2.AppendRecordsRequest) -> None:
        """Not safe to repeat once it may have been stored: tried again only while
        the journal surely never had it (outages.py)."""

        async def append(deadline: float) -> None:
            await self.journal.AppendRecords(request, timeout=deadline, wait_for_ready=True)

        await patiently(
            append,
            f"run {self.run_id}: records",
            rpc_timeout=self.timeout,
            window=self.outage_seconds,
            idempotent=False,
        )

    async def drain(self) -> None:
        """Wait until every emitted record is stored (raises if an append failed)."""
        self._send_now.set()
        self._hurry.set()
        await asyncio.sleep(0)  # let records handed over by other threads arrive
        while self._pump is not None:
            if not self._pump.done():
                await asyncio.wait([self._pump])
                continue
            self._settle(self._pump)
            if not self._buffer or self._failure is not None:
                break
            self._pump = asyncio.create_task(self._send_all(), name=f"records-{self.run_id}")
        if self._failure is not None:
            raise self._failure
