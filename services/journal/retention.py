"""The retention sweep: an ended run's events are deleted once they are older
than the retention period, leaving a tombstone that says they expired."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from waybill.common import codec
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


async def sweep_forever(
    store: JournalStore,
    retention_seconds: float,
    every_seconds: float,
    on_expired: Callable[[list[str]], Awaitable[None]],
) -> None:
    while True:
        await asyncio.sleep(every_seconds)
        try:
            await sweep_once(store, retention_seconds, on_expired)
        except Exception:  # the next pass tries again
            log.exception("retention sweep failed")
