"""The scheduler's clock: the real one, or a file tests move forward.

Only the scheduler reads it (when a cron is due, what counts as missed, whether
an end_time is past). With `WAYBILL_CRON_CLOCK_FILE` a test writes an RFC 3339
time into a file and the scheduler takes it as "now": a simulated hour of
firings passes in seconds, with real processes. Production never sets it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from waybill.common import codec


class SystemClock:
    """The real clock: sleeps are real sleeps."""

    def now(self) -> datetime:
        return codec.now_utc()

    def seconds_until(self, moment: datetime | None) -> float | None:
        """How long to sleep until `moment`; None: no moment to wake for."""
        if moment is None:
            return None
        return max(0.0, (moment - self.now()).total_seconds())


class FileClock(SystemClock):
    """ "Now" is the time written in a file. Simulated time does not pass by
    itself, so a sleep lasts until a wake-up or the scheduler's longest sleep
    (tests set it short), then the file is read again."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def now(self) -> datetime:
        moment = datetime.fromisoformat(self.path.read_text().strip())
        return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)

    def seconds_until(self, moment: datetime | None) -> float | None:
        return None  # the scheduler's longest sleep, then the file is read again


def clock_for(clock_file: Path | None) -> SystemClock:
    return FileClock(clock_file) if clock_file is not None else SystemClock()
