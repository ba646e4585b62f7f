"""What this journal process did, counted; served by `Journal.GetStats`."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class JournalStats:
    events_appended: int = 0
    events_stored: int = 0  # written to SQL by this process's write-behind
    subscriptions: int = 0  # Subscribe calls served
    live_subscribers: int = 0  # following a log right now
    # A live subscriber's buffer filled up (it read slower than events came): it
    # was switched to catching up from the log, missing nothing.
    subscriber_overflows: int = 0
    redis_errors: int = 0  # Redis calls that failed (each retried or fallen back from)
    # Live subscribers that lost Redis and read the log meanwhile (once per outage).
    redis_fallbacks: int = 0
    redis_seeds: int = 0  # run numbering (re)started in Redis from the SQL log
    # Events a Flush copied from Redis to SQL: their replica never wrote them (it
    # stopped before its write-behind did).
    events_repaired: int = 0
    # Journal replicas this one evicted (their heartbeat stopped) while Redis had
    # lost its state, and events this one did not store because it had been evicted.
    replicas_evicted: int = 0
    events_abandoned: int = 0
    runs_expired: int = 0  # logs deleted by this process's retention sweep

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


STATS = JournalStats()
