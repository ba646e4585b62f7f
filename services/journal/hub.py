"""Numbering, live fan-out and the durable write-behind of run events.

A run's events are held in memory while it is live: an appended event gets the
next sequence number, reaches live subscribers at once, and is queued for a
batched SQL write right behind. `Subscribe` takes the snapshot and registers
its queue without yielding to the event loop in between, so the seam between
replay and live has no hole and no duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from common.errors import busy, not_found
from services.journal.store import JournalStore, StoredEvent

log = logging.getLogger("waybill.journal")

END = None  # what a subscriber's queue receives when the log is closed


@dataclass
class RunLog:
    run_id: str
    epoch: int = 0
    events: list[StoredEvent] = field(default_factory=list)
    closed: bool = False
    forgotten: bool = False  # deleted with its thread: gone for good
    head_stored: bool = False  # the run_logs row exists
    durable_seq: int = -1
    subscribers: set[asyncio.Queue[StoredEvent | None]] = field(default_factory=set)

    @property
    def next_seq(self) -> int:
        return len(self.events)


class JournalHub:
    def __init__(self, store: JournalStore, *, batch_max: int, evict_after: float) -> None:
        self.store = store
        self.batch_max = batch_max
        self.evict_after = evict_after
        self.logs: dict[str, RunLog] = {}
        self._loading: dict[str, asyncio.Task[RunLog]] = {}
        self._pending: asyncio.Queue[StoredEvent] = asyncio.Queue()
        self._durable = asyncio.Condition()
        self._writer: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write_behind(), name="journal-writer")

    async def stop(self) -> None:
        for run_log in self.logs.values():
            await self.flush(run_log.run_id)
        if self._writer is not None:
            self._writer.cancel()

    # ---- opening a run's log ---------------------------------------------------

    async def open(self, run_id: str) -> RunLog:
        """The in-memory log of a run, loaded from SQL the first time it is needed.

        The load runs as its own task: if the caller that started it goes away
        (a client that disconnects at once), the others waiting still get it.
        """
        existing = self.logs.get(run_id)
        if existing is not None:
            return existing
        loading = self._loading.get(run_id)
        if loading is None:
            loading = asyncio.create_task(self._load(run_id), name=f"load-{run_id}")
            self._loading[run_id] = loading
            loading.add_done_callback(lambda _task: self._loading.pop(run_id, None))
        return await asyncio.shield(loading)

    async def _load(self, run_id: str) -> RunLog:
        stored = await self.store.load(run_id)
        run_log = self.logs.get(run_id)
        if run_log is not None:  # created while we were reading
            return run_log
        run_log = RunLog(run_id)
        if stored is not None and stored.forgotten:
            run_log.forgotten = run_log.closed = True
        elif stored is not None:
            run_log.epoch = stored.epoch
            run_log.events = stored.events
            run_log.closed = stored.closed
            run_log.head_stored = True
            run_log.durable_seq = len(stored.events) - 1
        self.logs[run_id] = run_log
        if run_log.closed:
            self._evict_later(run_log)
        return run_log

    async def forget(self, run_ids: list[str]) -> int:
        """Delete runs' logs for good; their live subscribers get END. Returns how
        many had a stored log."""
        count = await self.store.forget(run_ids)
        for run_id in run_ids:
            loading = self._loading.get(run_id)
            if loading is not None:  # a load that read before the delete
                with contextlib.suppress(Exception):
                    await asyncio.shield(loading)
            run_log = self.logs.get(run_id)
            if run_log is None:
                continue  # the next open finds the tombstone
            run_log.forgotten = run_log.closed = True
            run_log.events = []
            for queue in run_log.subscribers:
                queue.put_nowait(END)
            run_log.subscribers.clear()
            async with self._durable:  # nothing more will be stored: release flushes
                run_log.durable_seq = run_log.next_seq - 1
                self._durable.notify_all()
            self._evict_later(run_log)
        return count

    # ---- writing ---------------------------------------------------------------

    async def append(self, run_id: str, epoch: int, items: list[tuple[str, bytes]]) -> int:
        run_log = await self.open(run_id)
        if run_log.forgotten:
            raise busy(f"run {run_id} was deleted with its thread")
        if epoch < run_log.epoch:
            raise busy(f"run {run_id}: epoch {epoch} is stale (current {run_log.epoch})")
        run_log.epoch = epoch
        if run_log.closed:
            raise busy(f"run {run_id}: the log is closed")
        for name, data in items:
            stored = StoredEvent(run_id, run_log.next_seq, name, data)
            run_log.events.append(stored)
            for queue in run_log.subscribers:
                queue.put_nowait(stored)
            self._pending.put_nowait(stored)
        return run_log.next_seq - 1

    async def flush(self, run_id: str) -> int:
        run_log = await self.open(run_id)
        target = run_log.next_seq - 1
        async with self._durable:
            await self._durable.wait_for(lambda: run_log.durable_seq >= target)
        return run_log.durable_seq

    async def close(self, run_id: str, epoch: int) -> None:
        run_log = await self.open(run_id)
        if run_log.forgotten:
            return  # deleted (after its run ended) before its runner closed it
        if epoch < run_log.epoch:
            raise busy(f"run {run_id}: epoch {epoch} is stale (current {run_log.epoch})")
        await self.flush(run_id)
        if not run_log.head_stored:
            await self.store.write([], {run_id: epoch})
            run_log.head_stored = True
        await self.store.mark_closed(run_id, epoch)
        run_log.closed = True
        for queue in run_log.subscribers:
            queue.put_nowait(END)
        run_log.subscribers.clear()
        self._evict_later(run_log)

    def _evict_later(self, run_log: RunLog) -> None:
        def evict() -> None:
            if self.logs.get(run_log.run_id) is run_log and not run_log.subscribers:
                del self.logs[run_log.run_id]

        asyncio.get_running_loop().call_later(self.evict_after, evict)

    async def _write_behind(self) -> None:
        while True:
            batch = [await self._pending.get()]
            while len(batch) < self.batch_max and not self._pending.empty():
                batch.append(self._pending.get_nowait())
            batch = [stored for stored in batch if not self._forgotten(stored.run_id)]
            if not batch:
                continue
            opened: dict[str, int] = {}
            for stored in batch:
                run_log = self.logs[stored.run_id]
                if not run_log.head_stored:
                    opened[stored.run_id] = run_log.epoch
                    run_log.head_stored = True
            try:
                await self.store.write(batch, opened)
            except Exception:
                log.exception("journal write failed for %d events; retrying", len(batch))
                for run_id in opened:
                    self.logs[run_id].head_stored = False
                for stored in batch:
                    self._pending.put_nowait(stored)
                await asyncio.sleep(0.2)
                continue
            async with self._durable:
                for stored in batch:
                    run_log = self.logs[stored.run_id]
                    run_log.durable_seq = max(run_log.durable_seq, stored.seq)
                self._durable.notify_all()

    def _forgotten(self, run_id: str) -> bool:
        run_log = self.logs.get(run_id)
        return run_log is None or run_log.forgotten

    # ---- reading ---------------------------------------------------------------

    async def subscribe(
        self, run_id: str, from_seq: int, live_only: bool, batch_max: int = 512
    ) -> AsyncIterator[list[StoredEvent] | None]:
        """Yield batches of events from `from_seq`, then live ones, then END once closed."""
        run_log = await self.open(run_id)
        if run_log.forgotten:
            raise not_found(f"Run {run_id} not found: it was deleted with its thread.")
        queue: asyncio.Queue[StoredEvent | None] = asyncio.Queue()
        start = run_log.next_seq if live_only else max(0, from_seq)
        backlog = run_log.events[start:]
        closed = run_log.closed
        if not closed:
            run_log.subscribers.add(queue)
        try:
            for offset in range(0, len(backlog), batch_max):
                yield backlog[offset : offset + batch_max]
            if closed:
                yield END
                return
            while True:
                batch, ended = await _next_batch(queue, batch_max)
                if batch:
                    yield batch
                if ended:
                    yield END
                    return
        finally:
            run_log.subscribers.discard(queue)


async def _next_batch(
    queue: asyncio.Queue[StoredEvent | None], batch_max: int
) -> tuple[list[StoredEvent], bool]:
    """Wait for one event, then take whatever else is already queued. (batch, ended)."""
    item = await queue.get()
    batch: list[StoredEvent] = []
    while item is not END:
        batch.append(item)
        if len(batch) >= batch_max or queue.empty():
            return batch, False
        item = queue.get_nowait()
    return batch, True
