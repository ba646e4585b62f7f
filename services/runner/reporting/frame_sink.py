"""A run's frames on their way to the journal, in order.

`emit` never waits: it queues the frame and asks the runner's `JournalLink`
for a turn on the shared append stream. `drain` waits until the journal has
answered for everything emitted; `flush` also waits until it is stored
durably. A refused or lost batch fails the sink: the next `emit` or `drain`
raises, so a run never goes on believing its events were kept.
"""

from __future__ import annotations

import asyncio
import logging

from waybill.services.runner.persistence.fencing import RunFence
from waybill.services.runner.reporting.journal_link import JournalLink
from waybill.services.runner.run.outages import DependencyOutage, patiently
from waybill.v1 import journal_pb2, journal_pb2_grpc

log = logging.getLogger("waybill.runner")


class JournalRefused(RuntimeError):
    """The journal refused a batch of this run's events (stale epoch, closed log)."""


class FrameSink:
    def __init__(
        self,
        journal: journal_pb2_grpc.JournalStub,
        link: JournalLink,
        run_id: str,
        epoch: int,
        fence: RunFence,
        timeout: float = 30.0,
    ) -> None:
        self.journal = journal
        self.link = link
        self.timeout = timeout
        self.run_id = run_id
        self.epoch = epoch
        self.fence = fence
        self.waiting_for_turn = False  # the link's bookkeeping
        self._buffer: list[tuple[str, bytes]] = []  # (event, data), made into a batch later
        self._emitted = 0
        self._answered = 0
        self._failure: BaseException | None = None
        self._progress = asyncio.Event()

    def emit(self, event: str, data: bytes) -> None:
        self.emit_all([(event, data)])

    def emit_all(self, frames: list[tuple[str, bytes]]) -> None:
        """Queue frames (event, data) in order; one call per chunk of the graph's stream."""
        if self._failure is not None:
            raise self._failure
        self._buffer.extend(frames)
        self._emitted += len(frames)
        self.link.request_turn(self)

    # ---- called by the link -------------------------------------------------------

    def take_batch(self) -> journal_pb2.AppendRequest | None:
        """Everything queued, as one request; None when there is nothing to send."""
        if not self._buffer or self._failure is not None:
            return None
        try:
            self.fence.check("journal append")
        except Exception as error:
            self.fail(error)
            return None
        batch, self._buffer = self._buffer, []
        request = journal_pb2.AppendRequest(run_id=self.run_id, epoch=self.epoch)
        add = request.events.add  # cheaper than making each RunEvent first
        for event, data in batch:
            add(event=event, data=data)
        return request

    def answered(self, answer: journal_pb2.AppendResponse, count: int) -> None:
        if answer.error:
            self.fail(JournalRefused(f"run {self.run_id}: {answer.error}"))
            return
        self._answered += count
        self._progress.set()

    def fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        self._progress.set()

    # ---- waiting ------------------------------------------------------------------

    async def drain(self, deadline: float | None = None) -> None:
        """Wait until the journal has answered for every emitted event (raises if one failed)."""
        while self._failure is None and self._answered < self._emitted:
            self._progress.clear()
            await asyncio.wait_for(self._progress.wait(), deadline or self.timeout)
        if self._failure is not None:
            raise self._failure

    async def flush(self, deadline: float | None = None) -> None:
        """Drain, then wait until the journal has stored everything durably (each
        wait at most `deadline`; both safe to repeat: see outages.py)."""
        await self.drain(deadline)
        await self.journal.Flush(
            journal_pb2.FlushRequest(run_id=self.run_id),
            timeout=deadline or self.timeout,
            wait_for_ready=True,
        )

    async def flush_patiently(self, outage_seconds: float) -> None:
        """`flush`, retried while the journal is away, for at most `outage_seconds`."""
        await patiently(
            self.flush,
            f"run {self.run_id}: journal flush",
            rpc_timeout=self.timeout,
            window=outage_seconds,
        )

    async def close_ended_patiently(self, outage_seconds: float) -> bool:
        """The run has ended (admission accepted its terminal write): its log is
        closed, retried while the journal is away; past that, admission closes it
        after a grace (services/admission/runs/log_closes.py) and the run's end stands.
        Whether it was closed here."""
        try:
            await patiently(
                lambda deadline: self.close(after_terminal_write=True, deadline=deadline),
                f"run {self.run_id}: journal close",
                rpc_timeout=self.timeout,
                window=outage_seconds,
            )
        except DependencyOutage as error:
            log.warning("%s; admission closes the log later", error)
            return False
        return True

    async def close(
        self, after_terminal_write: bool = False, deadline: float | None = None
    ) -> None:
        """End the run's log. After admission accepted this epoch's terminal write no
        newer epoch can exist, so the lease no longer matters (a renewal refused
        meanwhile must not leave the log open and its readers waiting); the journal
        still refuses a stale epoch."""
        if not after_terminal_write:
            self.fence.check("journal close")
        await self.journal.Close(
            journal_pb2.CloseRequest(run_id=self.run_id, epoch=self.epoch),
            timeout=deadline or self.timeout,
            wait_for_ready=True,
        )
