"""`checkpointer.ttl` of langgraph.json: threads expire.

As on LangGraph Platform with `strategy: "delete"`, a thread not updated for
`default_ttl` minutes is deleted with everything that hangs off it (its runs,
their events and receipts, its checkpoints and workspace: `ThreadRemoval`), every
`sweep_interval_minutes`. A thread with an active run is left for the next sweep.
`keep_latest` (prune old checkpoints, keep the thread) is not supported yet.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import grpc

from waybill.common import codec
from waybill.common.background import BackgroundLoop
from waybill.common.errors import ServiceError
from waybill.common.project import ProjectError
from waybill.common.settings import Settings
from waybill.services.admission.thread_store import ThreadStore

log = logging.getLogger("waybill.admission.thread_ttl")

KEYS = {"strategy", "default_ttl", "sweep_interval_minutes", "sweep_limit"}
DEFAULT_SWEEP_MINUTES = 5.0  # LangGraph's default
DEFAULT_SWEEP_LIMIT = 1000  # threads one sweep deletes at most


@dataclass(frozen=True)
class ThreadTTL:
    minutes: float
    sweep_minutes: float = DEFAULT_SWEEP_MINUTES
    sweep_limit: int = DEFAULT_SWEEP_LIMIT


def thread_ttl(settings: Settings) -> ThreadTTL | None:
    """The project's `checkpointer.ttl` (None: threads never expire)."""
    project = settings.project()
    section = project.section("checkpointer") if project is not None else None
    if section is None:
        return None
    if not isinstance(section, dict):
        raise ProjectError("checkpointer: must be an object")
    raw = section.get("ttl")
    if raw is None:
        return None
    return _parse(raw)


def _parse(raw: Any) -> ThreadTTL | None:
    if not isinstance(raw, dict):
        raise ProjectError("checkpointer.ttl: must be an object")
    unknown = set(raw) - KEYS
    if unknown:
        raise ProjectError(f"checkpointer.ttl: unknown keys {sorted(unknown)}")
    strategy = raw.get("strategy", "delete")
    if strategy != "delete":
        raise ProjectError(
            f"checkpointer.ttl.strategy: {strategy!r} is not supported (only 'delete')"
        )
    minutes = _positive(raw, "default_ttl", None)
    if minutes is None:
        return None  # no default: nothing expires
    return ThreadTTL(
        minutes,
        _positive(raw, "sweep_interval_minutes", DEFAULT_SWEEP_MINUTES) or DEFAULT_SWEEP_MINUTES,
        int(_positive(raw, "sweep_limit", DEFAULT_SWEEP_LIMIT) or DEFAULT_SWEEP_LIMIT),
    )


def _positive(raw: dict[str, Any], key: str, default: float | None) -> float | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ProjectError(f"checkpointer.ttl.{key}: a positive number (got {value!r})")
    return float(value)


async def sweep_once(
    store: ThreadStore, remove: Callable[[str], Awaitable[None]], ttl: ThreadTTL
) -> int:
    """Delete the threads idle past the TTL (at most `sweep_limit`); returns how many."""
    cutoff = codec.now_utc() - timedelta(minutes=ttl.minutes)
    deleted = 0
    for thread_id in await store.threads_idle_since(cutoff, ttl.sweep_limit):
        try:
            await remove(thread_id)
            deleted += 1
        except (ServiceError, grpc.aio.AioRpcError) as error:  # busy again, a peer down
            log.warning("expired thread %s not deleted yet: %s", thread_id, error)
    if deleted:
        log.info("deleted %d expired threads", deleted)
    return deleted


def thread_sweep_loop(
    store: ThreadStore, remove: Callable[[str], Awaitable[None]], ttl: ThreadTTL
) -> BackgroundLoop:
    """A sweep every `sweep_interval_minutes`, the first one that long after start;
    a failed sweep (a database hiccup) is tried again at the next."""
    every_seconds = ttl.sweep_minutes * 60

    async def sweep() -> float:
        await sweep_once(store, remove, ttl)
        return every_seconds

    return BackgroundLoop(
        "thread-ttl-sweep",
        sweep,
        log=log,
        retry_seconds=every_seconds,
        first_sleep=every_seconds,
    )
