"""The background loop every service's standing work runs on: a wake that
arrives during a pass is kept, a stop ends a sleep at once and lets a pass
finish, a pass that raises does not end the loop, and the due time a pass
returns (or an alarm set by `wake_by`) is when the next pass starts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import timedelta

import pytest

from waybill.common import codec
from waybill.common.background import DUE_MARGIN_SECONDS, BackgroundLoop, seconds_until

pytestmark = pytest.mark.timeout(30)

log = logging.getLogger("tests.background")


class Passes:
    """A pass that records when it ran, returns `delay`, and can be held open."""

    def __init__(self, delay: float | None = None) -> None:
        self.delay = delay
        self.started: list[float] = []
        self.finished = 0
        self.hold: asyncio.Event | None = None  # set: passes run through
        self.entered = asyncio.Event()

    async def __call__(self) -> float | None:
        self.started.append(time.monotonic())
        self.entered.set()
        if self.hold is not None:
            await self.hold.wait()
        self.finished += 1
        return self.delay

    async def count_reaches(self, count: int, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while len(self.started) < count:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True


def a_loop(passes: Passes, **options: float | None) -> BackgroundLoop:
    return BackgroundLoop("test-loop", passes, log=log, retry_seconds=0.05, **options)  # type: ignore[arg-type]


async def test_a_wake_during_a_pass_starts_another_pass_at_once() -> None:
    passes = Passes(delay=None)  # nothing due: only a wake starts the next pass
    passes.hold = asyncio.Event()
    loop = a_loop(passes)
    loop.start()
    await passes.entered.wait()
    loop.wake()  # the pass may have read the state before this change
    passes.hold.set()
    assert await passes.count_reaches(2, seconds=2.0), "the wake during the pass was lost"
    await loop.stop()


async def test_without_a_wake_the_loop_sleeps_until_woken() -> None:
    passes = Passes(delay=None)
    loop = a_loop(passes)
    loop.start()
    assert await passes.count_reaches(1, seconds=2.0)
    assert not await passes.count_reaches(2, seconds=0.3)
    loop.wake()
    assert await passes.count_reaches(2, seconds=2.0)
    await loop.stop()


async def test_stop_during_a_sleep_ends_the_loop_at_once() -> None:
    passes = Passes(delay=60.0)
    loop = a_loop(passes)
    loop.start()
    assert await passes.count_reaches(1, seconds=2.0)
    began = time.monotonic()
    await loop.stop()
    assert time.monotonic() - began < 1.0
    assert len(passes.started) == 1


async def test_stop_lets_the_pass_in_progress_finish_and_starts_no_other() -> None:
    passes = Passes(delay=0.0)  # always due again at once
    passes.hold = asyncio.Event()
    loop = a_loop(passes, stop_seconds=10.0)
    loop.start()
    await passes.entered.wait()
    stopping = asyncio.create_task(loop.stop())
    await asyncio.sleep(0.1)
    assert not stopping.done(), "stop returned while its pass was still running"
    passes.hold.set()
    await asyncio.wait_for(stopping, 2.0)
    assert passes.finished == 1
    assert len(passes.started) == 1


async def test_a_pass_that_overruns_the_stop_wait_is_cancelled() -> None:
    passes = Passes(delay=None)
    passes.hold = asyncio.Event()  # never set: the pass hangs
    loop = a_loop(passes, stop_seconds=0.2)
    loop.start()
    await passes.entered.wait()
    began = time.monotonic()
    await asyncio.wait_for(loop.stop(), 2.0)
    assert 0.15 < time.monotonic() - began < 1.5
    assert passes.finished == 0


async def test_a_pass_that_raises_is_logged_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0
    second_pass = asyncio.Event()

    async def flaky() -> float | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("the database is restarting")
        second_pass.set()
        return None

    loop = BackgroundLoop("flaky-loop", flaky, log=log, retry_seconds=0.1)
    with caplog.at_level(logging.ERROR, logger=log.name):
        loop.start()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(second_pass.wait(), 2.0)
        await loop.stop()
    assert calls == 2, "the loop died with its first pass"
    failed = [r for r in caplog.records if "flaky-loop: pass failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None


async def test_a_failed_pass_can_be_logged_without_its_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def leaky() -> float | None:
        raise RuntimeError("https://api.example/bot-TOKEN/getUpdates")

    loop = BackgroundLoop(
        "quiet-loop", leaky, log=log, retry_seconds=60.0, traceback_on_error=False
    )
    with caplog.at_level(logging.WARNING, logger=log.name):
        loop.start()
        await asyncio.sleep(0.1)
        await loop.stop()
    assert "RuntimeError" in caplog.text
    assert "TOKEN" not in caplog.text


async def test_the_next_pass_comes_at_the_due_time_the_pass_returned() -> None:
    passes = Passes(delay=0.4)
    loop = a_loop(passes)
    loop.start()
    assert await passes.count_reaches(2, seconds=3.0)
    await loop.stop()
    gap = passes.started[1] - passes.started[0]
    assert 0.38 <= gap < 1.0


async def test_max_sleep_caps_every_sleep() -> None:
    passes = Passes(delay=None)
    loop = a_loop(passes, max_sleep=0.3)
    loop.start()
    assert await passes.count_reaches(2, seconds=3.0)
    await loop.stop()
    assert 0.28 <= passes.started[1] - passes.started[0] < 1.0


async def test_the_first_pass_waits_for_first_sleep() -> None:
    passes = Passes(delay=None)
    loop = a_loop(passes, first_sleep=0.3)
    began = time.monotonic()
    loop.start()
    assert await passes.count_reaches(1, seconds=3.0)
    await loop.stop()
    assert 0.28 <= passes.started[0] - began < 1.0


async def test_wake_by_sets_an_alarm_on_a_sleeping_loop_and_no_pass_now() -> None:
    passes = Passes(delay=None)
    loop = a_loop(passes)
    loop.start()
    assert await passes.count_reaches(1, seconds=2.0)
    await asyncio.sleep(0.05)  # asleep, with nothing due
    asked = time.monotonic()
    loop.wake_by(asyncio.get_running_loop().time() + 0.4)
    assert await passes.count_reaches(2, seconds=3.0)
    await loop.stop()
    assert 0.38 <= passes.started[1] - asked < 1.0


async def test_wake_by_later_than_the_loop_wakes_anyway_changes_nothing() -> None:
    passes = Passes(delay=0.3)
    loop = a_loop(passes)
    loop.start()
    assert await passes.count_reaches(1, seconds=2.0)
    loop.wake_by(asyncio.get_running_loop().time() + 30.0)
    assert await passes.count_reaches(2, seconds=3.0)
    await loop.stop()
    assert passes.started[1] - passes.started[0] < 1.0


async def test_wake_by_during_a_pass_makes_one_more_pass() -> None:
    passes = Passes(delay=None)
    passes.hold = asyncio.Event()
    loop = a_loop(passes)
    loop.start()
    await passes.entered.wait()
    loop.wake_by(asyncio.get_running_loop().time() + 30.0)  # the pass read its timers already
    passes.hold.set()
    assert await passes.count_reaches(2, seconds=2.0)
    await loop.stop()


def test_seconds_until_a_stored_moment_wakes_just_after_it() -> None:
    now = codec.now_utc()
    assert seconds_until(None) is None
    assert seconds_until(now - timedelta(seconds=30)) == DUE_MARGIN_SECONDS
    ahead = seconds_until(now + timedelta(seconds=2))
    assert ahead is not None and 1.9 < ahead <= 2.0 + DUE_MARGIN_SECONDS
    naive = (now + timedelta(seconds=2)).replace(tzinfo=None)  # as SQLite returns it
    ahead = seconds_until(naive)
    assert ahead is not None and 1.9 < ahead <= 2.0 + DUE_MARGIN_SECONDS
