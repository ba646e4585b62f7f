"""Numbering, live fan-out, replay and retention of run events.

Design
------
Every run has one log: events numbered 0, 1, 2, ... with no gap (`metadata` is
0; SSE `id:` is the number). SQL is the durable copy (`run_event_batches`, a
compressed row per batch: `store.py`), written right behind the live path
(`writer.py`); `Flush` waits for it, and the runner flushes before it writes the
run's receipt and status.

Two live paths, one contract (`JournalHub` below; tests/e2e/test_journal_hub_contract.py
runs the same tests against both):

- **Memory** (`MemoryJournalHub` in `memory_hub.py`, the embedded default: one
  journal replica, no Redis).
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

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

import grpc

from waybill.common.errors import ServiceError, not_found
from waybill.services.journal.store import EXPIRED, JournalStore, StoredEvent
from waybill.services.journal.subscriber import END, Follow, LogSource

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


class JournalHub(LogSource, Protocol):
    """What the journal's servicer needs of a live path. Both implementations keep
    the same promises: numbers from 0 without a gap or a repeat, an append of a
    stale epoch or to a closed log refused, a close that says whether it was the
    first, and a subscription that replays, follows and ends exactly once."""

    store: JournalStore  # the durable copy both write behind to

    def start(self) -> None: ...

    async def stop(self) -> None:
        """Store everything accepted, then let go of what the hub holds."""
        ...

    async def append(self, run_id: str, epoch: int, items: list[tuple[str, bytes]]) -> int:
        """Number and fan out `items` (event name, data); the last number given."""
        ...

    async def flush(self, run_id: str) -> int:
        """Wait until SQL has every event appended so far; the last number."""
        ...

    async def close(self, run_id: str, epoch: int) -> bool:
        """Close the run's log once SQL has it all; False when it was closed
        already (or deleted)."""
        ...

    async def forget(self, run_ids: list[str]) -> int:
        """Delete runs' logs for good (their thread was deleted); live subscribers
        get END. How many had a stored log."""
        ...

    async def expired(self, run_ids: list[str]) -> None:
        """The retention sweep deleted these runs' logs from SQL."""
        ...

    def subscribe(
        self, run_id: str, from_seq: int, live_only: bool
    ) -> AsyncIterator[list[StoredEvent] | None]:
        """Batches of events from `from_seq`, then live ones, then END once closed."""
        ...
