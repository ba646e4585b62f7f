"""How a run ended, and the terminal status admission is told of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langgraph.types import StateSnapshot

from waybill.common import codec
from waybill.common.statuses import ThreadStatus
from waybill.common.usage import TokenCount
from waybill.services.runner.reporting.token_ledger import token_count_proto
from waybill.v1 import admission_pb2, common_pb2


class RunAttemptsExhausted(RuntimeError):
    """Every runner that held the run lost its lease before finishing it."""


class DeliveryFailed(RuntimeError):
    """The graph finished, but delivery could not verify what it delivered."""


@dataclass
class Outcome:
    status: common_pb2.RunStatus
    error: BaseException | None = None
    stop_reason: str = ""


def interrupts_of(snapshot: StateSnapshot) -> dict[str, Any]:
    found: dict[str, list[Any]] = {}
    for task in snapshot.tasks:
        if task.interrupts:
            found[task.id] = [{"value": i.value, "id": i.id} for i in task.interrupts]
    return found


def is_paused(outcome: Outcome, snapshot: StateSnapshot) -> bool:
    """Finished by interrupt(): the thread waits for a resume."""
    return outcome.status == common_pb2.RUN_STATUS_SUCCESS and bool(
        interrupts_of(snapshot) or snapshot.next
    )


def finish_request(
    run: common_pb2.Run,
    runner_id: str,
    outcome: Outcome,
    snapshot: StateSnapshot,
    rolled_back: bool,
    token_counts: list[TokenCount],
) -> admission_pb2.RunFinished:
    interrupts = interrupts_of(snapshot)
    thread_status: str
    if rolled_back:
        thread_status = ThreadStatus.IDLE
    elif outcome.status == common_pb2.RUN_STATUS_SUCCESS and (interrupts or snapshot.next):
        thread_status = ThreadStatus.INTERRUPTED  # paused by interrupt(): waiting for a resume
    else:
        thread_status = ""
    return admission_pb2.RunFinished(
        run_id=run.run_id,
        runner_id=runner_id,
        epoch=run.epoch,
        status=outcome.status,
        stop_reason=outcome.stop_reason,
        values_json=codec.dumps(snapshot.values or {}),
        interrupts_json=codec.dumps(interrupts),
        thread_status=thread_status,
        rolled_back=rolled_back,
        token_counts=[token_count_proto(count) for count in token_counts],
        error=thread_error(outcome, rolled_back),
    )


# LangGraph Platform's exceptions for a cancelled run (langgraph_api.errors).
CANCELLED = {
    False: ("UserInterrupt", "User interrupted the run"),
    True: ("UserRollback", "User requested rollback of the run"),
}


def thread_error(outcome: Outcome, rolled_back: bool) -> common_pb2.RunError | None:
    """Why the run failed or was cancelled, as the platform shows it on the thread."""
    if outcome.error is not None:
        return common_pb2.RunError(error=type(outcome.error).__name__, message=str(outcome.error))
    if outcome.status == common_pb2.RUN_STATUS_INTERRUPTED:
        error, message = CANCELLED[rolled_back]
        return common_pb2.RunError(error=error, message=message)
    return None
