"""The retention sweep: an ended run's events are deleted once they are older
than the retention period, leaving a tombstone that says they expired."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from waybill.common import codec
from waybill.common.background import BackgroundLoop
from waybill.services.journal.stats import STATS
from waybill.services.journal.store import JournalStore

log = logging.getLogger("waybill.journal")

BATCH = 500  # logs deleted per transaction


async def sweep_once(
    store: JournalStore,
    retention_seconds: float,
    on_expired: Callable[[list[str]], Awaitable[None]],
) -> int:
    """Delete every log that ended more than `retention_seconds` ago; returns how many."""
    ended_before = codec.now_utc() - timedelta(seconds=retention_seconds)
    swept = 0
    while True:
        run_ids = await store.expire(ended_before, BATCH)
        if run_ids:
            await on_expired(run_ids)
        swept += len(run_ids)
        if len(run_ids) < BATCH:
            break
    STATS.runs_expired += swept
    if swept:
        log.info("retention sweep: deleted the events of %d ended runs", swept)
    return swept


def retention_loop(
    store: JournalStore,
    retention_seconds: float,
    every_seconds: float,
    on_expired: Callable[[list[str]], Awaitable[None]],
) -> BackgroundLoop:
    """A sweep every `every_seconds`, the first one that long after start; a
    failed sweep is tried again at the next."""

    async def sweep() -> float:
        await sweep_once(store, retention_seconds, on_expired)
        return every_seconds

    return BackgroundLoop(
        "retention-sweep",
        sweep,
        log=log,
        retry_seconds=every_seconds,
        first_sleep=every_seconds,
    )
