"""Threads' time-to-live: the `ttl` of threads.create / threads.update, and the
project's `checkpointer.ttl` (langgraph.json), as LangGraph Platform has them.

A thread's TTL is a strategy and a number of minutes, stored on its row with the
time it expires. It is set by the `ttl` a create or an update sends, else at the
thread's creation by the project's `default_ttl` (with its `strategy`). It is
refreshed (expiry = now + its minutes) by every update of the thread and by every
run admitted on it; a run on a thread without a TTL gives it the project's
default ("a new run applies the configured TTL"), so threads made before the
default was configured expire once they are used again, and idle ones never.

Every `sweep_interval_minutes` (else `WAYBILL_THREAD_TTL_SWEEP_SECONDS`) admission
sweeps the expired threads that have no active run (those wait for the next
sweep), at most `sweep_limit` a sweep:
- `delete`: the thread goes with everything that hangs off it, as
  `DELETE /threads/{id}` deletes it (`ThreadRemoval`);
- `keep_latest`: the runner's keep_latest prune (`POST /threads/prune`'s) keeps
  only the newest checkpoint of each namespace; the thread stays, its TTL
  disarmed until its next update or run.
A thread refreshed between the sweep's query and its turn is left alone.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import grpc

from waybill.common import codec
from waybill.common.background import BackgroundLoop
from waybill.common.errors import ServiceError, invalid
from waybill.common.project import ProjectError
from waybill.common.settings import Settings
from waybill.v1 import common_pb2

log = logging.getLogger("waybill.admission.thread_ttl")

KEYS = {"strategy", "default_ttl", "sweep_interval_minutes", "sweep_limit"}
STRATEGIES = ("delete", "keep_latest")
DEFAULT_SWEEP_LIMIT = 1000  # threads one sweep handles at most
# A TTL longer than this (about 1900 years) never expires; one as negative has
# expired already (LangGraph Platform takes any number of minutes).
MAX_TTL_MINUTES = 1e9


@dataclass(frozen=True)
class ThreadTTL:
    """A thread's time-to-live: what happens when it expires, and after how long."""

    strategy: str
    minutes: float

    def expires(self, now: datetime) -> datetime | None:
        """When it expires if refreshed at `now` (None: never)."""
        if self.minutes > MAX_TTL_MINUTES:
            return None
        return now + timedelta(minutes=max(self.minutes, -MAX_TTL_MINUTES))


@dataclass(frozen=True)
class TTLPolicy:
    """The project's `checkpointer.ttl`, and how often admission sweeps."""

    default: ThreadTTL | None = None  # None: threads get no TTL unless they ask
    sweep_seconds: float = 300.0
    sweep_limit: int = DEFAULT_SWEEP_LIMIT

    def resolve(self, requested: common_pb2.ThreadTTL | None) -> ThreadTTL | None:
        """The TTL a create (or an update) asked for, its minutes defaulting to the
        project's; None: the thread gets none."""
        if requested is None:
            return self.default
        strategy = requested.strategy or "delete"
        if strategy not in STRATEGIES:
            raise invalid(f"ttl.strategy: one of {list(STRATEGIES)} (got {strategy!r}).")
        if requested.HasField("minutes"):
            return ThreadTTL(strategy, checked_minutes(requested.minutes))
        if self.default is None:
            return None
        return ThreadTTL(strategy, self.default.minutes)


def checked_minutes(minutes: float) -> float:
    if not math.isfinite(minutes):
        raise invalid(f"ttl.ttl: a finite number of minutes (got {minutes}).")
    return minutes


def thread_ttl_policy(settings: Settings) -> TTLPolicy:
    """The project's `checkpointer.ttl` (a bad one stops start-up: ProjectError)."""
    project = settings.project()
    section = project.section("checkpointer") if project is not None else None
    if section is not None and not isinstance(section, dict):
        raise ProjectError("checkpointer: must be an object")
    raw = section.get("ttl") if section is not None else None
    if raw is None:
        return TTLPolicy(sweep_seconds=settings.thread_ttl_sweep_seconds)
    return _parse(raw, settings.thread_ttl_sweep_seconds)


def _parse(raw: Any, sweep_seconds: float) -> TTLPolicy:
    if not isinstance(raw, dict):
        raise ProjectError("checkpointer.ttl: must be an object")
    unknown = set(raw) - KEYS
    if unknown:
        raise ProjectError(f"checkpointer.ttl: unknown keys {sorted(unknown)}")
    strategy = raw.get("strategy", "delete")
    if strategy not in STRATEGIES:
        raise ProjectError(
            f"checkpointer.ttl.strategy: one of {list(STRATEGIES)} (got {strategy!r})"
        )
    minutes = _positive(raw, "default_ttl")
    every = _positive(raw, "sweep_interval_minutes")
    limit = _positive(raw, "sweep_limit")
    return TTLPolicy(
        ThreadTTL(strategy, minutes) if minutes is not None else None,
        every * 60 if every is not None else sweep_seconds,
        int(limit) if limit is not None else DEFAULT_SWEEP_LIMIT,
    )


def _positive(raw: dict[str, Any], key: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ProjectError(f"checkpointer.ttl.{key}: a positive number (got {value!r})")
    if not math.isfinite(value):
        raise ProjectError(f"checkpointer.ttl.{key}: a finite number (got {value!r})")
    return float(value)


class ExpiredThreads(Protocol):
    """What the sweep needs (ThreadRemoval): the expired threads, each strategy's action."""

    async def expired(self, now: datetime, limit: int) -> list[tuple[str, str]]:
        """(thread_id, strategy) of the threads expired by `now` with no active run."""

    async def delete_expired(self, thread_id: str, now: datetime) -> None:
        """Delete the thread, as DELETE /threads/{id} does, if still expired by `now`."""

    async def keep_latest_expired(self, thread_id: str, now: datetime) -> None:
        """Prune the thread to its newest checkpoints, if still expired by `now`."""


async def sweep_once(threads: ExpiredThreads, limit: int) -> int:
    """Apply the strategy of each thread expired by now (at most `limit`); returns how
    many were handled."""
    now = codec.now_utc()
    handled = 0
    for thread_id, strategy in await threads.expired(now, limit):
        act = threads.keep_latest_expired if strategy == "keep_latest" else threads.delete_expired
        try:
            await act(thread_id, now)
            handled += 1
        except (ServiceError, grpc.aio.AioRpcError) as error:  # busy again, a peer down
            log.warning("expired thread %s not swept yet (%s): %s", thread_id, strategy, error)
    if handled:
        log.info("swept %d expired threads", handled)
    return handled


def thread_sweep_loop(threads: ExpiredThreads, policy: TTLPolicy) -> BackgroundLoop:
    """A sweep every `policy.sweep_seconds`, the first one that long after start;
    a failed sweep (a database hiccup) is tried again at the next."""

    async def sweep() -> float:
        await sweep_once(threads, policy.sweep_limit)
        return policy.sweep_seconds

    return BackgroundLoop(
        "thread-ttl-sweep",
        sweep,
        log=log,
        retry_seconds=policy.sweep_seconds,
        first_sleep=policy.sweep_seconds,
    )
