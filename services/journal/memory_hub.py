"""The embedded default journal (see the contract and the design in `hub.py`): one
replica, no Redis. It numbers events itself, holds a live run's log in memory and
fans it out in process; SQL gets the durable copy right behind (`writer.py`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from waybill.common.errors import busy
from waybill.services.journal.hub import HubConfig, gone_error
from waybill.services.journal.stats import STATS
from waybill.services.journal.store import EXPIRED, FORGOTTEN, JournalStore, StoredEvent
from waybill.services.journal.subscriber import Page, Subscriber, subscription
from waybill.services.journal.writer import WriteBehind


@dataclass
class RunLog:
    run_id: str
    epoch: int = 0
    events: list[StoredEvent] = field(default_factory=list)
    closed: bool = False
    closing: bool = False  # a close is on its way to SQL: appends are refused already
    gone: str | None = None  # forgotten or expired: only the tombstone is left
    subscribers: set[Subscriber] = field(default_factory=set)

    @property
    def next_seq(self) -> int:
        return len(self.events)

    def end_subscribers(self) -> None:
        for subscriber in self.subscribers:
            subscriber.end()


class MemoryJournalHub:
    """One journal replica: numbering and fan-out in memory, durable copy in SQL."""

    def __init__(self, store: JournalStore, config: HubConfig) -> None:
        self.store = store
        self.config = config
        self.writer = WriteBehind(store, config.batch_max, linger_seconds=config.write_linger)
        self.logs: dict[str, RunLog] = {}
        self._loading: dict[str, asyncio.Task[RunLog]] = {}

    def start(self) -> None:
        self.writer.start()

    async def stop(self) -> None:
        for run_id in list(self.logs):
            await self.writer.wait_durable(run_id)
        self.writer.stop()

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
        if stored is not None and stored.gone is not None:
            run_log.gone = stored.gone
            run_log.closed = True
        elif stored is not None:
            run_log.epoch = stored.epoch
            run_log.events = stored.events
            run_log.closed = stored.closed
            self.writer.run(run_id).head_stored = True
        self.logs[run_id] = run_log
        if run_log.closed:
            self._evict_later(run_log)
        return run_log

    async def forget(self, run_ids: list[str]) -> int:
        """Delete runs' logs for good; their live subscribers get END. Returns how
        many had a stored log."""
        count = await self.store.forget(run_ids)
        for run_id in run_ids:
            await self._wait_for_load(run_id)
            run_log = self.logs.get(run_id)
            if run_log is not None:  # else the next open finds the tombstone
                await self._bury(run_log, FORGOTTEN)
        return count

    async def expired(self, run_ids: list[str]) -> None:
        """The retention sweep deleted these runs' logs from SQL."""
        for run_id in run_ids:
            await self._wait_for_load(run_id)
            run_log = self.logs.get(run_id)
            if run_log is not None:
                await self._bury(run_log, EXPIRED)

    async def _wait_for_load(self, run_id: str) -> None:
        loading = self._loading.get(run_id)
        if loading is not None:  # a load that read before the delete
            with contextlib.suppress(Exception):
                await asyncio.shield(loading)

    async def _bury(self, run_log: RunLog, gone: str) -> None:
        run_log.gone = gone
        run_log.closed = True
        run_log.events = []
        run_log.end_subscribers()
        await self.writer.drop(run_log.run_id)  # nothing more will be stored
        self._evict_later(run_log)

    # ---- writing ---------------------------------------------------------------

    async def append(self, run_id: str, epoch: int, items: list[tuple[str, bytes]]) -> int:
        run_log = await self.open(run_id)
        if run_log.gone is not None:
            raise busy(f"run {run_id} was deleted with its thread")
        if epoch < run_log.epoch:
            raise busy(f"run {run_id}: epoch {epoch} is stale (current {run_log.epoch})")
        run_log.epoch = epoch
        if run_log.closed or run_log.closing:
            raise busy(f"run {run_id}: the log is closed")
        first = run_log.next_seq
        fresh = [StoredEvent(run_id, first + i, name, data) for i, (name, data) in enumerate(items)]
        run_log.events.extend(fresh)
        for subscriber in run_log.subscribers:  # live fan-out first ...
            subscriber.offer(fresh)
        self.writer.put(fresh, epoch)  # ... the durable write right behind
        STATS.events_appended += len(fresh)
        return run_log.next_seq - 1

    async def flush(self, run_id: str) -> int:
        run_log = await self.open(run_id)
        await self.writer.wait_durable(run_id)
        return run_log.next_seq - 1

    async def close(self, run_id: str, epoch: int) -> bool:
        """Close the run's log; False when it was closed already (or deleted)."""
        run_log = await self.open(run_id)
        if run_log.gone is not None:
            return False  # deleted (after its run ended) before its runner closed it
        if epoch < run_log.epoch:
            raise busy(f"run {run_id}: epoch {epoch} is stale (current {run_log.epoch})")
        if run_log.closed or run_log.closing:
            return False  # its runner closed it, and admission makes sure (a second close)
        run_log.closing = True  # no append gets in behind the flush
        try:
            await self.flush(run_id)
            # SQL first, readers after: whoever saw the end (a `join`, a stream's
            # last event) finds the log closed everywhere, e.g. a late record refused.
            closed = await self.store.mark_closed(run_id, epoch)
        finally:
            run_log.closing = False  # failed: SQL is the truth, a close tried again writes it
        run_log.closed = True
        run_log.end_subscribers()
        self._evict_later(run_log)
        return closed

    def _evict_later(self, run_log: RunLog) -> None:
        def evict() -> None:
            if self.logs.get(run_log.run_id) is not run_log:
                return
            if run_log.subscribers:
                self._evict_later(run_log)  # a replay still reads it: later
                return
            del self.logs[run_log.run_id]
            self.writer.release(run_log.run_id)

        asyncio.get_running_loop().call_later(self.config.evict_after, evict)

    # ---- reading ---------------------------------------------------------------

    async def readable(self, run_id: str) -> None:
        """Raise NOT_FOUND (deleted) or LogExpired when the run's log is gone."""
        run_log = await self.open(run_id)
        if run_log.gone is not None:
            raise gone_error(run_id, run_log.gone, self.config.retention_seconds)

    def subscribe(
        self, run_id: str, from_seq: int, live_only: bool
    ) -> AsyncIterator[list[StoredEvent] | None]:
        """Yield batches of events from `from_seq`, then live ones, then END once closed."""
        return subscription(self, run_id, from_seq, live_only, self.config.following())

    # LogSource: what `follow` reads and attaches to.

    async def read(self, run_id: str, from_seq: int, limit: int) -> Page:
        run_log = await self.open(run_id)
        events = run_log.events[from_seq : from_seq + limit]
        reaches_end = from_seq + len(events) >= run_log.next_seq
        return Page(events, closed=run_log.closed and reaches_end)

    async def head(self, run_id: str) -> int:
        return (await self.open(run_id)).next_seq

    async def attach(self, run_id: str, subscriber: Subscriber, from_seq: int) -> None:
        run_log = await self.open(run_id)
        if not run_log.closed:
            run_log.subscribers.add(subscriber)

    def detach(self, run_id: str, subscriber: Subscriber) -> None:
        run_log = self.logs.get(run_id)
        if run_log is not None:
            run_log.subscribers.discard(subscriber)
