"""The life of one run on a runner.

begin (the start barrier) -> metadata -> astream, journaling every frame ->
settle a cancel (rollback or close dangling tool calls) -> flush the journal ->
receipt -> terminal status -> close the journal. Every durable write is checked
against the run's fence first, so a runner that lost the run writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, suppress
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.pregel import Pregel
from langgraph.types import StateSnapshot

from waybill.common import codec
from waybill.common.identity import LOCAL_USER
from waybill.common.settings import get_settings
from waybill.common.statuses import CancelAction, RunStatus
from waybill.common.usage import TokenCount, summarize
from waybill.services.runner.after_run import AfterRun
from waybill.services.runner.after_run import wanted as wants_after_run
from waybill.services.runner.agent.workspace import SNAPSHOT_GATES
from waybill.services.runner.call_spans import call_spans
from waybill.services.runner.deliverables import (
    added_messages,
    presented_paths,
    verifies_workspace,
)
from waybill.services.runner.fencing import FencedCheckpointer, RunFence, StaleEpochError
from waybill.services.runner.frames import error_event, graph_frames, metadata_event
from waybill.services.runner.graph_context import graph_context
from waybill.services.runner.graphs import GraphRegistry, run_user
from waybill.services.runner.journal_sink import JournalSink
from waybill.services.runner.loop_turns import TURN_EVERY_SECONDS, LoopTurns
from waybill.services.runner.model_calls import CURRENT_RUN
from waybill.services.runner.node_threads import RUN_OF_TASK, require_free_thread
from waybill.services.runner.outages import DependencyOutage, patiently
from waybill.services.runner.outcome import (
    DeliveryFailed,
    Outcome,
    finish_request,
)
from waybill.services.runner.owned_store import store_of
from waybill.services.runner.peers import Peers
from waybill.services.runner.receipts import (
    confirm_finished,
    receipt_request,
    receipt_without_state,
    write_receipt,
)
from waybill.services.runner.record_sink import RecordSink
from waybill.services.runner.run_inputs import RunLimits, graph_input, run_config, thread_config
from waybill.services.runner.run_journal import RunJournal, delivery_record, with_callbacks
from waybill.services.runner.run_state import answer_dangling_tool_calls, final_state
from waybill.services.runner.sandbox.leases import SANDBOXES
from waybill.services.runner.snapshots import WorkspaceSnapshot, starting_point
from waybill.services.runner.state_limits import StateTooLarge, check_frames, check_state
from waybill.services.runner.stats import STATS
from waybill.services.runner.store import RunnerStore
from waybill.services.runner.tool_calls import ToolCalls, install
from waybill.services.runner.unstarted import close_unstarted
from waybill.v1 import admission_pb2, common_pb2, delivery_pb2

log = logging.getLogger("waybill.runner")


class RunExecution:
    def __init__(
        self,
        run: common_pb2.Run,
        runner_id: str,
        graphs: GraphRegistry,
        peers: Peers,
        store: RunnerStore,
        limits: RunLimits,
        start_now: bool = False,
    ) -> None:
        self.run = run
        self.start_now = start_now
        self.runner_id = runner_id
        self.graphs = graphs
        self.peers = peers
        self.store = store
        self.limits = limits
        self.kwargs: dict[str, Any] = codec.loads(run.kwargs_json, {})
        self.config = run_config(run, self.kwargs)
        self.fence = RunFence(run.run_id, run.epoch, limits.lease_seconds)
        self.sink = JournalSink(
            peers.journal, peers.journal_link, run.run_id, run.epoch, self.fence, peers.rpc_timeout
        )
        self.cancel_action: str | None = None
        self.handed_back = False
        self.run_journal: RunJournal | None = None  # typed records and token usage
        self.verify_workspace = False  # the agent has workspace tools: delivery checks files
        self.checkpointer: FencedCheckpointer | None = None  # the run's, once it is built
        # The workspace's before-snapshot, taken when a file tool first asks.
        self.workspace = WorkspaceSnapshot(run, peers, self.fence, self._starting_point)
        self._graph_task: asyncio.Task[Outcome] | None = None
        self.receipt: delivery_pb2.Receipt | None = None  # once written
        # Memory and title work left once the run ended (after_run.py); the worker
        # runs it in the background.
        self.after_run: AfterRun | None = None
        self.tool_calls: ToolCalls | None = None  # the run's record of its calls
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
        if calls is None or calls.drained.is_set() or self._graph_task is None or rolling_back:
            self._cut()
            return
        calls.stop()
        if self._grace is None:
            self._grace = asyncio.create_task(self._cut_after_grace(calls))

    async def _cut_after_grace(self, calls: ToolCalls) -> None:
        grace = self.limits.cancel_grace_seconds
        waiting = dict(calls.in_flight)
        with suppress(TimeoutError):  # then the tools still executing are cut
            await asyncio.wait_for(calls.drained.wait(), grace)
        finished = [name for call_id, name in waiting.items() if call_id not in calls.in_flight]
        self._cut(finished_in_grace=finished)

    def _cut(self, finished_in_grace: list[str] | None = None) -> None:
        """The cancel takes the graph down now; the journal says what was cut."""
        running = self._graph_task is not None and not self._graph_task.done()
        if running and self.run_journal is not None:
            self.run_journal.sink.emit(
                "cancel",
                {
                    "action": self.cancel_action or CancelAction.INTERRUPT,
                    "cut": self.run_journal.in_flight(),
                    "finished_in_grace": finished_in_grace or [],
                },
            )
        self._stop_graph()

    def lease_lost(self) -> None:
        self.fence.lose()
        self._stop_graph()

    def hand_back(self) -> None:
        """Draining: stop without finishing; another runner resumes from the checkpoint."""
        self.handed_back = True
        self.fence.lose()
        self._stop_graph()

    def _stop_graph(self) -> None:
        if self.tool_calls is not None:
            self.tool_calls.halt()
        if self._graph_task is not None and not self._graph_task.done():
            self._graph_task.cancel()

    # ---- the run -----------------------------------------------------------------

    async def execute(self) -> None:
        RUN_OF_TASK.set(self.run.run_id)  # its sync nodes' threads are counted as its own
        if not self.start_now:
            # Admission did not start it at the claim: ask the barrier what to do.
            begin = await self.peers.admission.BeginRun(
                admission_pb2.BeginRunRequest(run_id=self.run.run_id, epoch=self.run.epoch),
                timeout=self.peers.rpc_timeout,
            )
            if not begin.started:
                ended = await close_unstarted(self.run, self.peers, begin.reason)
                if ended is not None:
                    await self._receipt_of_unstarted(*ended)
                return
        require_free_thread()
        if self.run.epoch > 1:
            # Fence off the epochs before this one. The first epoch has none to
            # fence off, so its run starts without this commit.
            await self.store.advance_fence(self.run.run_id, self.run.epoch)
        STATS.runs_started += 1
        if self.run.attempt > 1:
            STATS.runs_taken_over += 1
        try:
            await self._execute_started()
        except StaleEpochError as error:
            STATS.runs_fenced += 1
            log.warning("run %s: %s", self.run.run_id, error)

    async def _receipt_of_unstarted(
        self, status: common_pb2.RunStatus, error: BaseException | None
    ) -> None:
        """Admission ended the run already; its receipt still tells its webhooks."""
        if await self._receipt_without_state(status, error):
            await confirm_finished(self.peers, self.run)

    async def failure_receipt(self, error: BaseException) -> bool:
        """The receipt of a run that failed before it had a graph (a factory that
        raised): written before its terminal status, as every run's is, unless one
        was written already. True when its webhooks wait for `confirm_finished`."""
        if self.receipt is not None:
            return False
        return await self._receipt_without_state(common_pb2.RUN_STATUS_ERROR, error)

    async def confirm_finished(self) -> None:
        await confirm_finished(self.peers, self.run)

    async def _receipt_without_state(
        self, status: common_pb2.RunStatus, error: BaseException | None
    ) -> bool:
        """A receipt with no final state; whether its webhooks are held (False when
        it could not be written: the run ends either way)."""
        webhook = str(self.kwargs.get("webhook") or "")
        receipt = await receipt_without_state(self.peers, self.run, webhook, status, error)
        if receipt is None:
            return False
        self.receipt = receipt
        return bool(receipt.webhooks_held)

    async def _execute_started(self) -> None:
        self.sink.emit(*metadata_event(self.run.run_id, self.run.attempt))
        self.run_journal = RunJournal(
            RecordSink(
                self.peers.journal,
                self.run.run_id,
                self.run.epoch,
                self.fence,
                self.peers.rpc_timeout,
                self.limits.record_linger_seconds,
            ),
            LoopTurns(),
        )
        self.checkpointer = FencedCheckpointer(self.graphs.checkpointer, self.fence, self.store)
        install()
        self.tool_calls = ToolCalls(
            self.store.tool_calls,
            self.run.run_id,
            self.run.thread_id,
            self.fence,
            self.graphs.checkpointer.serde,
            self.run_journal.sink.emit,
            replaying=self.run.attempt > 1,
        )
        try:
            async with AsyncExitStack() as graph_scope:
                graph = await graph_scope.enter_async_context(self._open_graph())
                await self._execute_graph(graph, graph_scope.aclose)
        finally:  # lost ownership, a failure: a sandbox never outlives its run
            await self._release_sandbox("lease_lost" if self.fence.lost else "ended")

    async def _release_sandbox(self, reason: str) -> None:
        """The run's sandbox, if it leased one, is released (a no-op the second time).
        A release that fails is logged: it must not change how the run ends."""
        try:
            await SANDBOXES.release(self.run.run_id, self.run.epoch, reason)
        except Exception:
            log.exception("run %s: its sandbox could not be released", self.run.run_id)

    def _open_graph(self) -> AbstractAsyncContextManager[Pregel]:
        """The run's graph; a factory's context manager is held until it is released."""
        owner = self.run.owner_id or LOCAL_USER.user_id
        return self.graphs.open(
            self.run.graph_id,
            "threads.create_run",
            self.config,
            checkpointer=self.checkpointer,
            store=store_of(self.graphs.store, owner),
            user=run_user(self.config, owner, []),
            # The factory sees the whole context, as on LangGraph Platform (its graph's
            # schema is not known before it is built).
            context=graph_context(self.kwargs.get("context"), None),
        )

    async def _execute_graph(
        self, graph: Pregel, release_graph: Callable[[], Awaitable[None]]
    ) -> None:
        self.verify_workspace = verifies_workspace(
            self.run.graph_id, graph, self.kwargs, self.config
        )
        if not self.verify_workspace:
            outcome = await self._drive_with_limits(graph)
        else:
            gate_key = (self.run.run_id, self.run.epoch)
            SNAPSHOT_GATES[gate_key] = self.workspace.gate()
            try:
                outcome = await self._drive_with_limits(graph)
            finally:
                del SNAPSHOT_GATES[gate_key]
            # If no file tool asked, nothing changed the workspace and no snapshot
            # was taken: the receipt says so, and delivery's after-snapshot is also
            # the before-snapshot (one walk of the workspace, no extra call).
        ending = codec.RUN_STATUS_NAMES.get(outcome.status, RunStatus.ERROR)
        await self._release_sandbox("lease_lost" if self.fence.lost else str(ending))
        if self.fence.lost:
            if self.handed_back:
                STATS.runs_handed_back += 1
            raise StaleEpochError(f"run {self.run.run_id} stopped without finishing")
        rolled_back = outcome.status == common_pb2.RUN_STATUS_INTERRUPTED and (
            self.cancel_action == CancelAction.ROLLBACK
        )
        too_large = isinstance(outcome.error, StateTooLarge)
        if rolled_back or too_large:
            await self._drop_checkpoints()
        elif outcome.status != common_pb2.RUN_STATUS_SUCCESS:
            recorded = await self.tool_calls.recorded_answers() if self.tool_calls else {}
            await answer_dangling_tool_calls(graph, self.run, self.fence, recorded)
        if outcome.error is not None:
            self.sink.emit(*error_event(outcome.error, get_settings().error_tracebacks))
        # The end, in the order that makes it provable: journal flushed -> receipt ->
        # terminal status -> journal closed. Reads and records that no step waits
        # for go beside the step before them.
        self.fence.check("journal flush")
        snapshot, (start, started_from), _, _ = await asyncio.gather(
            final_state(graph, self.run),
            self._state_started_from(graph),
            self._flush_journal(),
            self.workspace.taken(),  # the receipt compares the workspace with it
        )
        if not too_large:
            outcome, snapshot = await self._refuse_too_large(graph, outcome, snapshot)
        await release_graph()  # a factory's resources end with the graph's last use
        presented = presented_paths(added_messages(started_from, snapshot.values))
        STATS.receipts_requested += 1
        receipt = await self._write_receipt(outcome, snapshot, presented, start)
        if outcome.status == common_pb2.RUN_STATUS_SUCCESS and receipt.verdict == "error":
            # Finished, but not delivered: the run is an error, said on its stream too.
            failure = DeliveryFailed(receipt.verdict_reason)
            outcome = Outcome(common_pb2.RUN_STATUS_ERROR, failure, receipt.verdict_reason)
            self.sink.emit(*error_event(failure))
            self.fence.check("journal flush")
            await self._flush_journal()
        self._record_the_end(outcome, snapshot)
        # The last records are stored while admission takes the terminal status: the
        # log closes after both, so whoever follows it to its end sees every record.
        accepted, _ = await asyncio.gather(
            self._report(outcome, snapshot, rolled_back), self._drain_records()
        )
        if accepted:
            await self._forget_calls()
            # Not fenced: admission accepted our terminal write, so no newer epoch can
            # exist; a renewal refused meanwhile (the run is no longer active) must not
            # leave the log open and its readers waiting. The journal still checks the epoch.
            # Should we die before this close, admission closes the log after a grace
            # (services/admission/log_closes.py).
            if receipt.webhooks_held:  # released while the streams are closed
                await asyncio.gather(confirm_finished(self.peers, self.run), self._close_journal())
            else:
                await self._close_journal()
            self._leave_after_run(outcome, snapshot, rolled_back)

    async def _flush_journal(self) -> None:
        await patiently(
            lambda deadline: self.sink.flush(deadline),
            f"run {self.run.run_id}: journal flush",
            rpc_timeout=self.peers.rpc_timeout,
        )

    async def _close_journal(self) -> None:
        """The run has ended: if the journal stays away, admission closes the log
        after a grace (log_closes.py); the run's end stands."""
        try:
            await patiently(
                lambda deadline: self.sink.close(after_terminal_write=True, deadline=deadline),
                f"run {self.run.run_id}: journal close",
                rpc_timeout=self.peers.rpc_timeout,
            )
        except DependencyOutage as error:
            log.warning("%s; admission closes the log later", error)

    async def _drop_checkpoints(self) -> None:
        """The run's checkpoints go (a rollback, a state too large to keep): its
        thread reads as it was before the run."""
        self.fence.check("rollback")
        if self.checkpointer is not None:
            await self.checkpointer.close()  # a background save may still be landing
        await self.graphs.checkpointer.adelete_for_runs([self.run.run_id])

    async def _refuse_too_large(
        self, graph: Pregel, outcome: Outcome, snapshot: StateSnapshot
    ) -> tuple[Outcome, StateSnapshot]:
        """A final state too large to keep (no event carried it) is refused here."""
        try:
            check_state(snapshot.values)
        except StateTooLarge as error:
            await self._drop_checkpoints()
            self.sink.emit(*error_event(error))
            await self._flush_journal()
            outcome = Outcome(common_pb2.RUN_STATUS_ERROR, error, f"StateTooLarge: {error}")
            snapshot = await final_state(graph, self.run)
        return outcome, snapshot

    def _leave_after_run(
        self, outcome: Outcome, snapshot: StateSnapshot, rolled_back: bool
    ) -> None:
        """A successful run of the lead agent leaves its memory and title to do."""
        if rolled_back or outcome.status != common_pb2.RUN_STATUS_SUCCESS:
            return
        if not wants_after_run(self.run.graph_id, get_settings().config_file()):
            return
        values = snapshot.values if isinstance(snapshot.values, dict) else {}
        self.after_run = AfterRun(
            run_id=self.run.run_id,
            epoch=self.run.epoch,
            thread_id=self.run.thread_id,
            user_id=self.run.owner_id or LOCAL_USER.user_id,
            messages=list(values.get("messages") or []),
        )

    async def _forget_calls(self) -> None:
        """The run has ended: no later attempt will ask its calls' record. A first
        attempt that stored none has nothing to delete (no transaction then)."""
        if self.run.attempt <= 1 and not (self.tool_calls and self.tool_calls.recorded):
            return
        try:
            await self.store.tool_calls.forget_run(self.run.run_id)
        except Exception as error:  # its thread's deletion removes them too
            log.warning("run %s: its tool-call record stays: %s", self.run.run_id, error)

    async def _drive_with_limits(self, graph: Pregel) -> Outcome:
        self._graph_task = asyncio.create_task(self._drive_graph(graph))
        if self.cancel_action is not None:  # a cancel arrived with the assignment
            self._graph_task.cancel()
        done, _ = await asyncio.wait([self._graph_task], timeout=self.limits.run_timeout_seconds)
        if not done:
            self._graph_task.cancel()
            await asyncio.wait([self._graph_task])
            seconds = self.limits.run_timeout_seconds
            return Outcome(
                common_pb2.RUN_STATUS_TIMEOUT,
                TimeoutError(f"run exceeded its time limit of {seconds:g} s"),
                f"timed out after {seconds:g} s",
            )
        if self._graph_task.cancelled():
            action = self.cancel_action or "interrupt"
            return Outcome(common_pb2.RUN_STATUS_INTERRUPTED, stop_reason=f"cancelled ({action})")
        return self._graph_task.result()

    async def _start_input(self, graph: Pregel) -> Any:
        """A taken-over run resumes from its own last checkpoint, if it made one."""
        if self.run.attempt > 1:
            latest = await self.graphs.checkpointer.aget_tuple(thread_config(self.run.thread_id))
            if latest is not None and latest.metadata.get("run_id") == self.run.run_id:
                return None
        return graph_input(self.kwargs)

    async def _drive_graph(self, graph: Pregel) -> Outcome:
        loop = asyncio.get_running_loop()
        CURRENT_RUN.set(self.tool_calls)  # this task's context: the graph's model calls
        turn_due = 0.0  # the first frame goes out at once
        try:
            async for frames in self._frames(graph):
                check_frames(frames)  # one too large would break the journal's stream
                self.sink.emit_all(frames)
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
                raise StaleEpochError(f"run {self.run.run_id} lost its lease") from error
            # The traceback too: where in the project's code it failed is what its
            # author needs first, and the log is the only place that has it.
            log.warning(
                "run %s failed: %s: %s",
                self.run.run_id,
                type(error).__name__,
                error,
                exc_info=error,
            )
            return Outcome(common_pb2.RUN_STATUS_ERROR, error, f"{type(error).__name__}: {error}")
        return Outcome(common_pb2.RUN_STATUS_SUCCESS)

    def _frames(self, graph: Pregel) -> AsyncIterator[list[tuple[str, bytes]]]:
        config = self.config
        handlers = [h for h in (self.run_journal, call_spans()) if h is not None]
        if handlers:  # the journal's records; with tracing, a span per model and tool call
            config = with_callbacks(config, *handlers)
        if self.tool_calls is not None:
            config = self.tool_calls.config(config)
        return graph_frames(graph, self.kwargs, config, lambda: self._start_input(graph))

    # ---- delivery ----------------------------------------------------------------

    async def _starting_point(self) -> CheckpointTuple | None:
        return await starting_point(self.run, self.graphs.checkpointer, self.checkpointer)

    async def _state_started_from(self, graph: Pregel) -> tuple[CheckpointTuple | None, Any]:
        """The checkpoint the run started from and the thread's values then (only
        read when its delivery is verified: the messages it added are where its
        present_files calls are)."""
        if not self.verify_workspace:
            return None, None
        start = await self._starting_point()
        return start, (await graph.aget_state(start.config)).values if start else None

    # ---- the end -----------------------------------------------------------------

    async def _write_receipt(
        self,
        outcome: Outcome,
        snapshot: StateSnapshot,
        presented: list[str],
        start: CheckpointTuple | None,
    ) -> delivery_pb2.Receipt:
        self.fence.check("receipt")
        request = receipt_request(
            self.run,
            outcome,
            snapshot,
            webhook=str(self.kwargs.get("webhook") or ""),
            verify_workspace=self.verify_workspace,
            presented=presented,
            untouched=self.verify_workspace and not self.workspace.started,
            usage=summarize(self._token_counts()),
            start=start,
        )
        receipt = await write_receipt(self.peers, request)
        self.receipt = receipt
        return receipt

    def _record_the_end(self, outcome: Outcome, snapshot: StateSnapshot) -> None:
        """The run's delivery and token usage, as its last records."""
        if self.run_journal is None:
            return
        sink = self.run_journal.sink
        status = codec.RUN_STATUS_NAMES.get(outcome.status, RunStatus.ERROR)
        sink.emit("delivery", delivery_record(status, outcome.stop_reason, snapshot))
        sink.emit("usage", summarize(self._token_counts()))

    async def _drain_records(self) -> None:
        if self.run_journal is not None:
            await self.run_journal.sink.drain()

    def _token_counts(self) -> list[TokenCount]:
        if self.run_journal is None:
            return []
        return self.run_journal.ledger.counts(get_settings().prices())

    async def _report(self, outcome: Outcome, snapshot: StateSnapshot, rolled_back: bool) -> bool:
        self.fence.check("terminal status")
        STATS.finishes_requested += 1
        request = finish_request(
            self.run, self.runner_id, outcome, snapshot, rolled_back, self._token_counts()
        )
        reply = await self.peers.admission.FinishRun(request, timeout=self.peers.rpc_timeout)
        if not reply.accepted:
            STATS.stale_writes_refused += 1
            log.warning("admission refused the end of run %s: it was taken over", self.run.run_id)
        return bool(reply.accepted)
