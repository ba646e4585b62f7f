"""One attempt's graph task: driven frame by frame into the run's journal within
its time limit, and stopped from outside by a cancel (after a grace for the tools
executing), its budget, a lost lease or a drain. `RunExecution` (execution.py)
builds the graph and ends the run; this holds the task between the two."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import suppress

from waybill.common.statuses import CancelAction
from waybill.services.runner.effects.tool_calls import ToolCalls
from waybill.services.runner.ending.outcome import Outcome
from waybill.services.runner.persistence.fencing import RunFence, StaleEpochError
from waybill.services.runner.reporting.frame_sink import FrameSink
from waybill.services.runner.reporting.loop_turns import TURN_EVERY_SECONDS
from waybill.services.runner.reporting.run_journal import RunJournal
from waybill.services.runner.run.budget import BudgetExceeded
from waybill.services.runner.run.scope import RunLimits, RunScope
from waybill.services.runner.run.state_limits import check_frames
from waybill.v1 import common_pb2

log = logging.getLogger("waybill.runner")

Frames = AsyncIterator[list[tuple[str, bytes]]]


class GraphDrive:
    def __init__(self, run_id: str, limits: RunLimits, fence: RunFence, sink: FrameSink) -> None:
        self.run_id = run_id
        self.limits = limits
        self.fence = fence
        self.sink = sink
        self.cancel_action: str | None = None
        self.over_budget: BudgetExceeded | None = None  # the run stopped at its budget
        self.handed_back = False
        # Known once the run has them: a cancel waits for the tools they count, and
        # journals what it cut.
        self.tool_calls: ToolCalls | None = None
        self.run_journal: RunJournal | None = None
        self._task: asyncio.Task[Outcome] | None = None
        self._grace: asyncio.Task[None] | None = None  # a cancel waiting for tools

    # ---- orders from outside -----------------------------------------------------

    def cancel(self, action: str) -> None:
        """Stop at the next boundary: at once between frames; a tool executing gets
        the cancel grace to finish and record its result, and no new call starts."""
        if self.cancel_action is None:
            self.cancel_action = action
        calls = self.tool_calls
        # A rollback removes everything the run wrote, a tool's recorded result with
        # it: nothing is gained by waiting for one, so it cuts at once.
        rolling_back = self.cancel_action == CancelAction.ROLLBACK
        if calls is None or calls.drained.is_set() or self._task is None or rolling_back:
            self._cut()
            return
        calls.stop()
        if self._grace is None:
            self._grace = asyncio.create_task(self._cut_after_grace(calls))

    def stop_at_budget(self, error: BudgetExceeded) -> None:
        """Past its budget: stopped as a cancel stops it, unless a cancel came first."""
        if self.cancel_action is None:
            self.over_budget = error
            self.cancel("budget")

    def lease_lost(self) -> None:
        self.fence.lose()
        self._stop()

    def hand_back(self) -> None:
        """Draining: stop without finishing; another runner resumes from the checkpoint."""
        self.handed_back = True
        self.fence.lose()
        self._stop()

    async def _cut_after_grace(self, calls: ToolCalls) -> None:
        grace = self.limits.cancel_grace_seconds
        waiting = dict(calls.in_flight)
        with suppress(TimeoutError):  # then the tools still executing are cut
            await asyncio.wait_for(calls.drained.wait(), grace)
        finished = [name for call_id, name in waiting.items() if call_id not in calls.in_flight]
        self._cut(finished_in_grace=finished)

    def _cut(self, finished_in_grace: list[str] | None = None) -> None:
        """The cancel takes the graph down now; the journal says what was cut."""
        running = self._task is not None and not self._task.done()
        if running and self.run_journal is not None:
            self.run_journal.sink.emit(
                "cancel",
                {
                    "action": self.cancel_action or CancelAction.INTERRUPT,
                    "cut": self.run_journal.in_flight(),
                    "finished_in_grace": finished_in_grace or [],
                },
            )
        self._stop()

    def _stop(self) -> None:
        if self.tool_calls is not None:
            self.tool_calls.halt()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    # ---- the drive ---------------------------------------------------------------

    async def drive(self, frames: Callable[[], Frames], scope: RunScope | None) -> Outcome:
        """The graph's outcome: its own, or the one its time limit, its budget or a
        cancel gave it."""
        self._task = asyncio.create_task(self._journal_frames(frames, scope))
        if self.cancel_action is not None:  # a cancel arrived with the assignment
            self._task.cancel()
        done, _ = await asyncio.wait([self._task], timeout=self.limits.run_timeout_seconds)
        if not done:
            self._task.cancel()
            await asyncio.wait([self._task])
            seconds = self.limits.run_timeout_seconds
            return Outcome(
                common_pb2.RUN_STATUS_TIMEOUT,
                TimeoutError(f"run exceeded its time limit of {seconds:g} s"),
                f"timed out after {seconds:g} s",
            )
        if self.over_budget is not None:  # stopped at its budget, or crossed it at its end
            return self.over_budget.outcome()
        if self._task.cancelled():
            action = self.cancel_action or "interrupt"
            return Outcome(common_pb2.RUN_STATUS_INTERRUPTED, stop_reason=f"cancelled ({action})")
        return self._task.result()

    async def _journal_frames(
        self, frames: Callable[[], Frames], scope: RunScope | None
    ) -> Outcome:
        loop = asyncio.get_running_loop()
        if scope is not None:  # this task's context: the graph's model calls
            scope.enter()
        turn_due = 0.0  # the first frame goes out at once
        try:
            async for batch in frames():
                # One too large would break the journal's stream.
                check_frames(batch, self.limits.largest_state_bytes)
                self.sink.emit_all(batch)
                # A graph that streams without awaiting anything (a fast model)
                # would starve the journal sink: give the loop a turn now and then,
                # not after every chunk, so that a burst goes out in a few batches.
                if loop.time() >= turn_due:
                    await asyncio.sleep(0)
                    turn_due = loop.time() + TURN_EVERY_SECONDS
        except StaleEpochError:
            raise
        except Exception as error:  # the graph's failure ends the run, not the runner
            if self.fence.lost:
                raise StaleEpochError(f"run {self.run_id} lost its lease") from error
            # The traceback too: where in the project's code it failed is what its
            # author needs first, and the log is the only place that has it.
            log.warning(
                "run %s failed: %s: %s", self.run_id, type(error).__name__, error, exc_info=error
            )
            return Outcome(common_pb2.RUN_STATUS_ERROR, error, f"{type(error).__name__}: {error}")
        return Outcome(common_pb2.RUN_STATUS_SUCCESS)
