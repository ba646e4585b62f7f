"""The durable copy: numbered events written to SQL in batches, right behind the
live path, with a per-run watermark that `Flush` waits on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from waybill.services.journal.stats import STATS
from waybill.services.journal.store import Fenced, JournalStore, StoredEvent

log = logging.getLogger("waybill.journal")


@dataclass
class Durability:
    """One run's write-behind bookkeeping in this process."""

    epoch: int = 0  # for the run_logs row written with the first batch
    head_stored: bool = False  # the run_logs row exists
    first: int = -1  # the first sequence number this process was handed (0: all of them)
    enqueued: int = -1  # highest sequence number handed to the writer
    # Highest sequence number below which everything this process was handed is
    # stored; numbers stored above it (a retried batch overtaken) wait in `above`.
    durable: int = -1
    above: set[int] = field(default_factory=set)
    dropped: bool = False  # forgotten or expired: nothing more is stored

    @property
    def settled(self) -> bool:
        return self.durable >= self.enqueued

    def stored(self, first: int, last: int) -> None:
        """Numbers `first`..`last` are stored."""
        if first > self.durable + 1:  # a hole below them: wait for it
            self.above.update(range(first, last + 1))
            return
        self.durable = max(self.durable, last)
        while self.durable + 1 in self.above:
            self.durable += 1
        if self.above:
            self.above = {seq for seq in self.above if seq > self.durable}


class WriteBehind:
    """Writes queued events to SQL. After the first event of a write arrives it waits
    up to `linger_seconds` for more, unless `batch_max` events are queued or someone
    waits for durability: a streaming run's events then go in a few large writes
    instead of one small commit per append (the live path never waits for them)."""

    def __init__(
        self,
        store: JournalStore,
        batch_max: int,
        retry_seconds: float = 0.2,
        linger_seconds: float = 0.0,
    ) -> None:
        self.store = store
        self.batch_max = batch_max
        self.retry_seconds = retry_seconds
        self.linger_seconds = linger_seconds
        self.runs: dict[str, Durability] = {}
        # One entry per append: consecutive events of one run.
        self._pending: asyncio.Queue[list[StoredEvent]] = asyncio.Queue()
        self._queued = 0  # events in `_pending`
        self._hurry = asyncio.Event()  # stop lingering: a batch is full, or a flush waits
        self._durable = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        # With Redis: this replica's id, fencing its writes (see replicas.py), and
        # what to do when they are refused.
        self.fence: str | None = None
        self.on_fenced: Callable[[], None] = lambda: None

    def start(self) -> None:
        self._task = asyncio.create_task(self._write_forever(), name="journal-writer")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def run(self, run_id: str) -> Durability:
        durability = self.runs.get(run_id)
        if durability is None:
            durability = self.runs[run_id] = Durability()
        return durability

    def put(self, events: list[StoredEvent], epoch: int) -> None:
        """Queue numbered events (of one run, in order) for the SQL write."""
        if not events:
            return
        durability = self.run(events[0].run_id)
        if durability.first < 0:
            # Another replica may have stored the ones before (a takeover there).
            durability.first = events[0].seq
            durability.durable = max(durability.durable, events[0].seq - 1)
        durability.epoch = max(durability.epoch, epoch)
        durability.enqueued = max(durability.enqueued, events[-1].seq)
        self._pending.put_nowait(events)
        self._queued += len(events)
        if self._queued >= self.batch_max:
            self._hurry.set()

    async def wait_durable(self, run_id: str) -> int:
        """Wait until every event this process queued for the run is stored; returns
        the run's watermark here (-1 when this process queued none)."""
        durability = self.run(run_id)
        if not (durability.dropped or durability.settled):
            self._hurry.set()
        async with self._durable:
            await self._durable.wait_for(lambda: durability.dropped or durability.settled)
        return durability.durable

    async def wait_all_durable(self) -> None:
        """Wait until everything queued so far, of every run, is stored."""
        for run_id in list(self.runs):
            await self.wait_durable(run_id)

    async def drop(self, run_id: str) -> None:
        """Store nothing more of this run (its log was deleted); release waiters."""
        durability = self.run(run_id)
        async with self._durable:
            durability.dropped = True
            self._durable.notify_all()

    def release(self, run_id: str) -> None:
        """Forget the run's bookkeeping once nothing of it is pending."""
        durability = self.runs.get(run_id)
        if durability is not None and (durability.dropped or durability.settled):
            del self.runs[run_id]

    async def _write_forever(self) -> None:
        while True:
            appends = [await self._pending.get()]
            await self._linger()
            size = len(appends[0])
            while size < self.batch_max and not self._pending.empty():
                appends.append(self._pending.get_nowait())
                size += len(appends[-1])
            self._queued -= size
            appends = [events for events in appends if not self._dropped(events[0].run_id)]
            if appends:
                await self._write(appends)

    async def _linger(self) -> None:
        if self.linger_seconds <= 0 or self._hurry.is_set():
            self._hurry.clear()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._hurry.wait(), self.linger_seconds)
        self._hurry.clear()

    def _dropped(self, run_id: str) -> bool:
        durability = self.runs.get(run_id)
        return durability is None or durability.dropped

    async def _abandon(self, refused: int) -> None:
        """This replica was evicted: what it still holds may be numbered over by now,
        so none of it is stored. Waiters are released (a flush then checks SQL)."""
        while not self._pending.empty():
            refused += len(self._pending.get_nowait())
        self._queued = 0
        log.error("journal replica evicted: %d events it numbered are not stored", refused)
        STATS.events_abandoned += refused
        async with self._durable:
            for durability in self.runs.values():
                durability.dropped = True
            self.runs.clear()
            self._durable.notify_all()
        self.on_fenced()

    async def _write(self, appends: list[list[StoredEvent]]) -> None:
        opened: dict[str, int] = {}
        for events in appends:
            durability = self.runs[events[0].run_id]
            if not durability.head_stored:
                opened[events[0].run_id] = durability.epoch
        batch = [event for events in appends for event in events]
        try:
            await self.store.write(batch, opened, self.fence)
        except Fenced:
            await self._abandon(len(batch))
            return
        except Exception:
            log.exception("journal write failed for %d events; retrying", len(batch))
            for events in appends:
                self._pending.put_nowait(events)
                self._queued += len(events)
            await asyncio.sleep(self.retry_seconds)
            return
        STATS.events_stored += len(batch)
        async with self._durable:
            for run_id in opened:
                self.runs[run_id].head_stored = True
            for events in appends:
                self.runs[events[0].run_id].stored(events[0].seq, events[-1].seq)
            self._durable.notify_all()
