"""Which status a run may move to from which, and what moves it there: the
transition table every conditional status write of `leases.py` (and the insert
of `run_store.py`, through `lease_on_admit`) is checked against.
"""

from __future__ import annotations

from waybill.common.statuses import RunStatus

PENDING, RUNNING = RunStatus.PENDING, RunStatus.RUNNING

# Which status a run may move to from which, and what moves it there. A run
# ended (success, error, timeout, interrupted) moves no more.
RUN_TRANSITIONS: dict[RunStatus, dict[RunStatus, str]] = {
    PENDING: {
        PENDING: "claim of a run cancelled before it started, or out of attempts: "
        "leased (epoch + 1) only for its runner to end it",
        RUNNING: "claim (or admit-and-claim): a runner holds its lease, epoch + 1",
        RunStatus.INTERRUPTED: "begin: it was cancelled before it started",
        RunStatus.ERROR: "begin, or a claim: out of attempts",
    },
    RUNNING: {
        RUNNING: "takeover of an expired lease (epoch + 1); or begin (same epoch)",
        RunStatus.SUCCESS: "finish",
        RunStatus.ERROR: "finish; or begin, or a claim: out of attempts",
        RunStatus.TIMEOUT: "finish",
        RunStatus.INTERRUPTED: "finish (cancelled)",
    },
}


def allowed_sources(target: str) -> list[RunStatus]:
    """The statuses a run may be in for a write of `target` to succeed."""
    return [source for source, targets in RUN_TRANSITIONS.items() if target in targets]
