"""The words a run and a thread are described by, each with one meaning.

`StrEnum`s, so a member compares equal to the string stored in the database and
sent on the wire (`RunStatus.PENDING == "pending"`); the proto enums and the
HTTP literals are translated in `codec`.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    PENDING = "pending"  # admitted, waiting for a runner (or for its start time)
    RUNNING = "running"  # a runner holds its lease
    SUCCESS = "success"
    ERROR = "error"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"  # cancelled, or stopped at a human-in-the-loop interrupt


class ThreadStatus(StrEnum):
    IDLE = "idle"
    BUSY = "busy"  # a run of the thread is pending or running
    INTERRUPTED = "interrupted"
    ERROR = "error"


class MultitaskStrategy(StrEnum):
    """What a new run does when its thread already has an active run."""

    REJECT = "reject"  # refuse the new run
    INTERRUPT = "interrupt"  # cancel the active run, keep what it did
    ROLLBACK = "rollback"  # cancel the active run and delete it
    ENQUEUE = "enqueue"  # run after it


class CancelAction(StrEnum):
    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"


# LangGraph Platform's default when a request names no strategy.
DEFAULT_MULTITASK_STRATEGY = MultitaskStrategy.ENQUEUE

ACTIVE_RUN_STATUSES: tuple[RunStatus, ...] = (RunStatus.PENDING, RunStatus.RUNNING)
TERMINAL_RUN_STATUSES: tuple[RunStatus, ...] = (
    RunStatus.SUCCESS,
    RunStatus.ERROR,
    RunStatus.TIMEOUT,
    RunStatus.INTERRUPTED,
)
