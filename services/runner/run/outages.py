"""A run's calls to the peers it depends on at its end, made patiently.

A journal or delivery that restarts, or pauses for longer than one call's
deadline, must not end the runs in flight `error` with a bare TimeoutError. The
calls at a run's end (the journal's flush and close, the receipt, the webhooks'
confirmation, the records) are tried again while their peer is away, for
`WAYBILL_DEPENDENCY_OUTAGE_SECONDS` in all. Past that window the run is handed
back (`DependencyOutage`): another attempt resumes it from its checkpoint.

A call that is safe to repeat (`idempotent`) waits for its peer to come back
(`wait_for_ready`) and is repeated after each deadline: the call's own
(`WAYBILL_RPC_TIMEOUT_SECONDS`) or what is left of the window, whichever is
shorter, but at least half a second. One that is not (appending records: a try
that timed out may have been stored) gets the whole window as its one deadline,
and is repeated only when its peer refused the connection (UNAVAILABLE).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from waybill.services.runner.stats import STATS

log = logging.getLogger("waybill.runner.outages")

T = TypeVar("T")

SHORTEST_TRY_SECONDS = 0.5
PAUSE_BETWEEN_TRIES_SECONDS = 0.2

UNREACHED = {grpc.StatusCode.UNAVAILABLE}
UNANSWERED = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


class DependencyOutage(RuntimeError):
    """A peer the run needs stayed away past the outage window: hand the run back."""


def _worth_repeating(error: BaseException, idempotent: bool) -> bool:
    if isinstance(error, grpc.aio.AioRpcError):
        return error.code() in (UNANSWERED if idempotent else UNREACHED)
    # A wait for the journal's answers that ran out (FrameSink.drain): waiting
    # again repeats nothing.
    return idempotent and isinstance(error, TimeoutError)


async def patiently(
    call: Callable[[float], Awaitable[T]],
    what: str,
    *,
    rpc_timeout: float,
    window: float,
    idempotent: bool = True,
) -> T:
    """`call(deadline)` until it answers, for at most the outage window (`window`:
    WAYBILL_DEPENDENCY_OUTAGE_SECONDS, `Peers.outage_seconds`)."""
    ends_at = time.monotonic() + window
    tries = 0
    while True:
        left = ends_at - time.monotonic()
        deadline = max(min(rpc_timeout, left) if idempotent else left, SHORTEST_TRY_SECONDS)
        tries += 1
        try:
            return await call(deadline)
        except Exception as error:
            if not _worth_repeating(error, idempotent):
                raise
            if time.monotonic() + PAUSE_BETWEEN_TRIES_SECONDS >= ends_at:
                raise DependencyOutage(
                    f"{what}: its peer stayed away for {window:g} s ({tries} tries)"
                ) from error
            STATS.dependency_retries += 1
            log.warning("%s: peer away (%s); trying again", what, _named(error))
            await asyncio.sleep(PAUSE_BETWEEN_TRIES_SECONDS)


def _named(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return error.code().name
    return type(error).__name__
