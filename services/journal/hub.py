"""Numbering, live fan-out, replay and retention of run events.

Design
------
Every run has one log: events numbered 0, 1, 2, ... with no gap (`metadata` is
0; SSE `id:` is the number). SQL is the durable copy (`run_event_batches`, a
compressed row per batch: `store.py`), written right behind the live path
(`writer.py`); `Flush` waits for it, and the runner flushes before it writes the
run's receipt and status.

Two live paths, one contract:

- **Memory** (`JournalHub`, the embedded default: one journal replica, no Redis).
  The replica numbers events itself; a live run's log is held in memory and fanned
  out in process.
- **Redis** (`RedisJournalHub` in `redis_hub.py`, when `WAYBILL_REDIS_URL` is set:
  any number of journal replicas, no sticky sessions). Each run has a Redis hash
  (next number, epoch, closed) and a Redis stream whose entry ids *are* the
  numbers (`0-<seq+1>`; the end marker is `1-0`). One Lua script checks the
  epoch, allocates the numbers and adds the entries atomically, so numbering stays
  gap-free and unique whichever replica each appender (a takeover included)
  talks to. Every replica follows the runs its subscribers read with one blocking
  `XREAD` per run and fans out locally. A retried append carries the same token,
  so an append whose reply was lost is not numbered twice.

Subscriptions (`subscriber.py`) replay the log from `from_seq`, then register a
bounded live buffer and follow it, tracking the next number owed: what they
already sent is dropped, any hole is read from the log, so there is no hole and
no duplicate at the seam. A reader too
slow for its buffer (`WAYBILL_SUBSCRIBER_BUFFER`) is counted
(`GetStats.subscriber_overflows`) and catches up from the log; the runner and the
other readers never wait for it.

If Redis restarts, readers fall back to polling SQL (`WAYBILL_JOURNAL_POLL_SECONDS`)
and reattach when it is back; appends and closes retry for
`WAYBILL_JOURNAL_REDIS_RETRY_SECONDS`, then fail with UNAVAILABLE. When Redis has
lost a run's state, the next append re-seeds it from the SQL log's highest number,
but only once every live journal replica has stored what it numbered before
(`replicas.py`: a heartbeat per replica in SQL, a Redis incarnation token, and a
fence on the writes of a replica evicted as dead), so no number is reused and
none is skipped, whichever replica the takeover appends through.

Retention: an ended run's events are kept `WAYBILL_JOURNAL_RETENTION_SECONDS`
(7 days) after its end, then deleted by a sweep every
`WAYBILL_JOURNAL_SWEEP_SECONDS`, leaving a tombstone: its stream answers 410 Gone
with "the run's events expired ...". LangGraph Platform likewise keeps resumable
stream data only for a while (`RESUMABLE_STREAM_TTL_SECONDS`); we keep the
durable log far longer and say so plainly when it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc

from waybill.common.errors import ServiceError, busy, not_found
from waybill.services.journal.stats import STATS
from waybill.services.journal.store import EXPIRED, FORGOTTEN, JournalStore, StoredEvent
from waybill.services.journal.subscriber import END, Follow, Page, Subscriber, subscription
from waybill.services.journal.writer import WriteBehind

__all__ = ["END", "HubConfig", "JournalHub", "LogExpired", "gone_error"]


@dataclass(frozen=True)
class HubConfig:
    batch_max: int = 512
    write_linger: float = 0.0  # the SQL write waits this long for more events
    evict_after: float = 30.0  # an ended run's log leaves memory after this
    subscriber_buffer: int = 1024
    poll_seconds: float = 0.2
    retention_seconds: float = 7 * 86400.0

    def following(self) -> Follow:
        return Follow(self.subscriber_buffer, self.batch_max, self.poll_seconds)


class LogExpired(ServiceError):
    """The run's events were swept after the retention period (HTTP 410)."""


def describe_seconds(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} seconds"


def gone_error(run_id: str, gone: str, retention_seconds: float) -> ServiceError:
    if gone == EXPIRED:
        return LogExpired(
            grpc.StatusCode.NOT_FOUND,
            f"Run {run_id}'s events expired: they are kept for "
            f"{describe_seconds(retention_seconds)} after the run ends.",
        )
    return not_found(f"Run {run_id} not found: it was deleted with its thread.")


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


class JournalHub:
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
