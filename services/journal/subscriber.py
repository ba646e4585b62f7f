"""One reader of a run's log: replay from the log, then follow live, bounded.

The reader replays the log, registers its live buffer once caught up, reads the
log once more, and then follows the buffer. Throughout it tracks the next
sequence number it owes its client: whatever the live path delivers below that
number is a duplicate and dropped; anything above it means a hole (events that
came between the read and the registration, an overflow, a lost Redis), which
is read from the log. So the seam between replay and live has no hole and no
duplicate, whatever the timing.

The live buffer is bounded: the fan-out never waits for a reader. A reader that
falls behind overflows its buffer; that is counted, the buffer is emptied, and
the reader catches up from the log, missing nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from waybill.services.journal.stats import STATS
from waybill.services.journal.store import StoredEvent

END = None  # the last item a subscription yields: the log is complete


@dataclass(frozen=True)
class Page:
    """What one read of the log returned."""

    events: list[StoredEvent]
    closed: bool = False  # the log is complete and these events reach its end
    behind: bool = False  # later events exist that could not be read yet: read again soon


class Subscriber:
    """A live reader's bounded buffer; the fan-out only ever calls the non-blocking
    methods (`offer`, `end`, `lose`)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.buffer: deque[StoredEvent] = deque()
        self.overflowed = False
        self.ended = False  # the live source saw the end of the log
        self.lost = False  # the live source failed: read the log until it is back
        self._wake = asyncio.Event()

    def offer(self, events: list[StoredEvent]) -> None:
        """Consecutive events, as one batch (a whole append fans out at once)."""
        if self.overflowed:
            return  # dropping until the reader catches up from the log
        if len(self.buffer) + len(events) > self.capacity:
            STATS.subscriber_overflows += 1
            self.overflowed = True
            self.buffer.clear()
        else:
            self.buffer.extend(events)
        self._wake.set()

    def end(self) -> None:
        self.ended = True
        self._wake.set()

    def lose(self) -> None:
        self.lost = True
        self._wake.set()

    async def wait(self, at_most: float | None = None) -> None:
        """Until something is offered, the end or a loss (or `at_most` seconds)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), at_most)
        self._wake.clear()


class LogSource(Protocol):
    """A run's log as a subscription sees it: readable from any sequence number,
    and followable live."""

    async def readable(self, run_id: str) -> None:
        """Raise NOT_FOUND (deleted) or LogExpired when the run's log is gone."""
        ...

    async def read(self, run_id: str, from_seq: int, limit: int) -> Page: ...

    async def head(self, run_id: str) -> int:
        """The next sequence number to be given (where `live_only` starts)."""
        ...

    async def attach(self, run_id: str, subscriber: Subscriber, from_seq: int) -> None: ...

    def detach(self, run_id: str, subscriber: Subscriber) -> None: ...


@dataclass(frozen=True)
class Follow:
    capacity: int  # the live buffer's bound
    batch_max: int  # events per yielded batch at most
    poll_seconds: float  # how often to re-read the log while the live path is down


async def subscription(
    source: LogSource, run_id: str, from_seq: int, live_only: bool, how: Follow
) -> AsyncIterator[list[StoredEvent] | None]:
    """A `Subscribe`, whichever hub serves it: refused when the log is gone,
    else batches from `from_seq` (or only new ones), then END once closed."""
    await source.readable(run_id)
    STATS.subscriptions += 1
    async for batch in follow(source, run_id, None if live_only else from_seq, how):
        yield batch


async def follow(
    source: LogSource, run_id: str, from_seq: int | None, how: Follow
) -> AsyncIterator[list[StoredEvent] | None]:
    """Yield batches of events from `from_seq` (None: only new ones), in order,
    each exactly once, then END once the log is complete."""
    subscriber = Subscriber(how.capacity)
    next_seq = await source.head(run_id) if from_seq is None else max(0, from_seq)
    attached = False  # a replay of an ended log never needs the live path
    try:
        from_log = True
        falling_back = False  # reading the log because the live path is down
        while True:
            if from_log:
                page = await source.read(run_id, next_seq, how.batch_max)
                if page.events:
                    yield page.events
                    next_seq = page.events[-1].seq + 1
                if page.closed:
                    yield END
                    return
                if page.events and (
                    len(page.events) >= how.batch_max or page.behind or subscriber.ended
                ):
                    continue  # more to read
                if not attached:
                    # Caught up: follow live from here, then read the log once
                    # more for what came in between (duplicates are dropped).
                    await source.attach(run_id, subscriber, next_seq)
                    attached = True
                    STATS.live_subscribers += 1
                    continue
                if subscriber.lost:
                    # The live path is down: read the log meanwhile, and try again.
                    if not falling_back:
                        STATS.redis_fallbacks += 1
                        falling_back = True
                    await asyncio.sleep(how.poll_seconds)
                    subscriber.lost = False
                    await source.attach(run_id, subscriber, next_seq)
                    continue
                if page.behind or subscriber.ended:
                    # A write on its way to SQL, or the end not in the log yet.
                    await subscriber.wait(how.poll_seconds)
                    continue
            batch, from_log = await _live_batch(subscriber, next_seq, how.batch_max)
            if batch:
                falling_back = False
                yield batch
                next_seq = batch[-1].seq + 1
    finally:
        if attached:
            STATS.live_subscribers -= 1
            source.detach(run_id, subscriber)


async def _live_batch(
    subscriber: Subscriber, next_seq: int, batch_max: int
) -> tuple[list[StoredEvent], bool]:
    """Wait for live events; return those that continue at `next_seq`, and whether
    the log must be read next (an overflow, a hole, the end, a lost live path)."""
    if not (subscriber.buffer or subscriber.overflowed or subscriber.ended or subscriber.lost):
        await subscriber.wait()
    if subscriber.overflowed:
        subscriber.overflowed = False
        subscriber.buffer.clear()
        return [], True
    batch: list[StoredEvent] = []
    expected = next_seq
    while subscriber.buffer and len(batch) < batch_max:
        event = subscriber.buffer.popleft()
        if event.seq < expected:
            continue  # already delivered from the log
        if event.seq > expected:
            subscriber.buffer.clear()
            return batch, True  # a hole: the log has what is missing
        batch.append(event)
        expected += 1
    if not batch and (subscriber.ended or subscriber.lost):
        return [], True
    return batch, False
