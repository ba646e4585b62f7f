"""A background loop: one task that makes a pass, then sleeps until its next pass
is due or until it is woken.

Every service's standing work is one of these (dispatch and its wake-up
listener, log closes, crons, the webhook outbox, channel polling and upkeep,
thread expiry, journal retention):

    async def send_due() -> float | None:   # one pass
        ...                                 # send what is due
        return seconds_until(await store.next_due())

    loop = BackgroundLoop("outbox", send_due, log=log, retry_seconds=1.0)
    loop.start()
    loop.wake()      # something is due now
    await loop.stop()

A pass returns how many seconds until the next one is due, or None when nothing
is (then only a wake, or `max_sleep`, starts the next). A pass that raises is
logged and the next one comes `retry_seconds` later: the loop never dies of it.

The wake-up flag is cleared *before* each pass, never after: a wake that arrives
while a pass runs (the pass may have read the state before it changed) makes the
next sleep end at once, so no wake is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from waybill.common import codec
from waybill.common.settings import get_settings

Pass = Callable[[], Awaitable[float | None]]
# A loop wakes this long after a stored moment: the pass then finds it due, not
# a hair early (the database's clock and the event loop's are not the same).
DUE_MARGIN_SECONDS = 0.05


def seconds_until(moment: datetime | None) -> float | None:
    """What a pass returns to be run again when `moment` (a stored UTC time)
    is due; None when there is no moment."""
    if moment is None:
        return None
    seconds = (codec.aware_utc(moment) - codec.now_utc()).total_seconds()
    return max(DUE_MARGIN_SECONDS, seconds + DUE_MARGIN_SECONDS)


class BackgroundLoop:
    def __init__(
        self,
        name: str,
        run_pass: Pass,
        *,
        log: logging.Logger,
        retry_seconds: float,
        max_sleep: float | None = None,
        first_sleep: float = 0.0,
        stop_seconds: float | None = None,
        traceback_on_error: bool = True,
    ) -> None:
        """`max_sleep`: the longest sleep (a poll interval), None for none.
        `first_sleep`: the first pass comes this long after `start`.
        `stop_seconds`: how long `stop` lets a pass in progress finish before
        cancelling it (0: at once, for a pass that waits on a peer by design);
        by default `WAYBILL_LOOP_STOP_SECONDS`.
        `traceback_on_error=False` logs a failed pass by its exception's type
        only (its message may carry a secret, such as a URL with a token)."""
        self.name = name
        self.run_pass = run_pass
        self.log = log
        self.retry_seconds = retry_seconds
        self.max_sleep = max_sleep
        self.first_sleep = first_sleep
        if stop_seconds is None:
            stop_seconds = get_settings().loop_stop_seconds
        self.stop_seconds = stop_seconds
        self.traceback_on_error = traceback_on_error
        self._woken = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._alarm: asyncio.TimerHandle | None = None  # ends the current sleep earlier
        # A pass is in progress or about to start (before the first sleep, too).
        self.in_pass = True
        # When the sleeping loop wakes by itself (event-loop time); None: only a wake.
        self.wakes_at: float | None = None

    # ---- control --------------------------------------------------------------------

    def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """End the loop: a sleeping one at once, one in a pass once that pass is
        done (cancelled after `stop_seconds`)."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        self._woken.set()
        self._cancel_alarm()
        await asyncio.wait([task], timeout=self.stop_seconds)
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def wake(self) -> None:
        """Make the next pass start now (or right after the one in progress)."""
        self._woken.set()

    def wake_by(self, moment: float) -> None:
        """Make sure a pass starts no later than `moment` (event-loop time). A
        sleeping loop that would wake later gets an alarm for it, and no pass now;
        a loop in a pass may have read its due time before the caller's change, so
        it makes one more pass."""
        if self.in_pass:
            self.wake()
        elif self.wakes_at is None or self.wakes_at > moment:
            self._cancel_alarm()
            self._alarm = asyncio.get_running_loop().call_at(moment, self.wake)
            self.wakes_at = moment

    # ---- the loop ---------------------------------------------------------------------

    async def _run(self) -> None:
        if self.first_sleep > 0:
            await self._sleep(self.first_sleep)
        while not self._stopping:
            self._woken.clear()  # before the pass: a wake during it is kept
            self._cancel_alarm()  # the pass reads every due time afresh
            self.in_pass = True
            try:
                delay = await self.run_pass()
            except Exception as error:
                delay = self.retry_seconds
                self._log_failure(error, delay)
            if self._stopping:
                return
            await self._sleep(delay)

    async def _sleep(self, seconds: float | None) -> None:
        if self.max_sleep is not None:
            seconds = self.max_sleep if seconds is None else min(seconds, self.max_sleep)
        if seconds is not None:
            seconds = max(0.0, seconds)
        self.wakes_at = None if seconds is None else asyncio.get_running_loop().time() + seconds
        self.in_pass = False
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), seconds)
        finally:
            self.in_pass = True
            self.wakes_at = None

    def _cancel_alarm(self) -> None:
        if self._alarm is not None:
            self._alarm.cancel()
            self._alarm = None

    def _log_failure(self, error: Exception, delay: float) -> None:
        if self.traceback_on_error:
            self.log.exception("%s: pass failed; trying again in %gs", self.name, delay)
        else:
            self.log.warning(
                "%s: pass failed (%s); trying again in %gs", self.name, type(error).__name__, delay
            )
