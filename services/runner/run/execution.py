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
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.pregel import Pregel
from langgraph.types import StateSnapshot

from waybill.common import codec
from waybill.common.identity import LOCAL_USER
from waybill.common.statuses import CancelAction, RunStatus
from waybill.common.usage import TokenCount, summarize
from waybill.services.runner.agent.workspace import workspace_root
from waybill.services.runner.effects.tool_calls import ToolCalls, forget_calls, install
from waybill.services.runner.ending.after_run import AfterRun
from waybill.services.runner.ending.after_run import wanted as wants_after_run
from waybill.services.runner.ending.deliverables import (
    added_messages,
    presented_paths,
    verifies_workspace,
)
from waybill.services.runner.ending.final_state import answer_dangling_tool_calls, final_state
from waybill.services.runner.ending.outcome import (
    DeliveryFailed,
    Outcome,
    finish_request,
)
from waybill.services.runner.ending.receipts import (
    confirm_finished,
    receipt_request,
    receipt_without_state,
    write_receipt,
)
from waybill.services.runner.ending.snapshots import WorkspaceSnapshot, starting_point
from waybill.services.runner.ending.unstarted import passes_start_barrier
from waybill.services.runner.graphs.context import graph_context
from waybill.services.runner.graphs.registry import GraphRegistry, run_user
from waybill.services.runner.peers import RunnerPeers
from waybill.services.runner.persistence.fencing import (
    FencedCheckpointer,
    RunFence,
    StaleEpochError,
)
from waybill.services.runner.persistence.owned_store import store_of
from waybill.services.runner.persistence.runner_store import RunnerStore
from waybill.services.runner.reporting.call_spans import call_spans
from waybill.services.runner.reporting.frame_sink import FrameSink
from waybill.services.runner.reporting.frames import error_event, graph_frames, metadata_event
from waybill.services.runner.reporting.loop_turns import LoopTurns
from waybill.services.runner.reporting.record_sink import RecordSink
from waybill.services.runner.reporting.run_journal import RunJournal, with_callbacks
from waybill.services.runner.run.budget import budget_watch, with_day_allowance
from waybill.services.runner.run.graph_drive import GraphDrive
from waybill.services.runner.run.inputs import graph_input, run_config, thread_config
from waybill.services.runner.run.node_threads import RUN_OF_TASK, require_free_thread
from waybill.services.runner.run.scope import RunLimits, RunScope, WorkspaceGate
from waybill.services.runner.run.state_limits import StateTooLarge, check_state
from waybill.services.runner.sandbox.leases import RunSandbox
from waybill.services.runner.stats import STATS
from waybill.v1 import common_pb2, delivery_pb2

log = logging.getLogger("waybill.runner")


class RunExecution:
    def __init__(
        self,
        run: common_pb2.Run,
        runner_id: str,
        graphs: GraphRegistry,
        peers: RunnerPeers,
        store: RunnerStore,
        limits: RunLimits,  # the runner's, read once from its settings
        start_now: bool = False,
    ) -> None:
        self.run = run
        self.start_now = start_now
        self.runner_id = runner_id
        self.graphs = graphs
        self.peers = peers
        self.store = store
        self.kwargs: dict[str, Any] = codec.loads(run.kwargs_json, {})
        limits = self.limits = limits.for_request(self.kwargs)
        self.config = run_config(run, self.kwargs)
        self.fence = RunFence(run.run_id, run.epoch, limits.lease_seconds)
        self.sink = FrameSink(
            peers.journal, peers.journal_link, run.run_id, run.epoch, self.fence, peers.rpc_timeout
        )
        self.drive = GraphDrive(run.run_id, limits, self.fence, self.sink)
        self.run_journal: RunJournal | None = None  # typed records and token usage
        self.verify_workspace = False  # the agent has workspace tools: delivery checks files
        self.checkpointer: FencedCheckpointer | None = None  # the run's, once it is built
        # The workspace's before-snapshot, taken when a file tool first asks.
        self.workspace = WorkspaceSnapshot(run, peers, self.fence, self._starting_point)
        self.receipt: delivery_pb2.Receipt | None = None  # once written
        # Memory and title work left once the run ended (after_run.py); the worker
        # runs it in the background.
        self.after_run: AfterRun | None = None
        self.log_closed = False  # by us, after admission accepted our terminal write
        self.tool_calls: ToolCalls | None = None  # the run's record of its calls
        self.sandbox: RunSandbox | None = None  # leased at the run's first command
        # What the graph's nodes and tools find of this attempt, once its graph is built.
        self.scope: RunScope | None = None

    # ---- orders from outside: the graph's drive carries them out -------------------

    def cancel(self, action: str) -> None:
        self.drive.cancel(action)

    def lease_lost(self) -> None:
        self.drive.lease_lost()

    def hand_back(self) -> None:
        self.drive.hand_back()

    # ---- the run -----------------------------------------------------------------

    async def execute(self) -> None:
        RUN_OF_TASK.set(self.run.run_id)  # its sync nodes' threads are counted as its own
        # Admission did not start it at the claim: ask the barrier what to do.
        if not self.start_now and not await passes_start_barrier(self.run, self.peers):
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

    async def failure_receipt(self, error: BaseException) -> bool:
        """The receipt of a run that failed before it had a graph (a factory that
        raised): written before its terminal status, as every run's is, unless one
        was written already. True when its webhooks wait for `confirm_finished`."""
        if self.receipt is not None:
            return False
        return await self._receipt_without_state(common_pb2.RUN_STATUS_ERROR, error)

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
        owner = self.run.owner_id or LOCAL_USER.user_id
        self.limits = self.drive.limits = await with_day_allowance(self.limits, self.peers, owner)
        self.run_journal = RunJournal(
            RecordSink(
                self.peers.journal,
                self.run.run_id,
                self.run.epoch,
                self.fence,
                self.peers.rpc_timeout,
                self.limits.record_linger_seconds,
                self.peers.outage_seconds,
            ),
            LoopTurns(),
        )
        self.checkpointer = FencedCheckpointer(self.graphs.checkpointer, self.fence, self.store)
        install(self.limits.record_model_calls)
        self.tool_calls = ToolCalls(
            self.store.tool_calls,
            self.run.run_id,
            self.run.thread_id,
            self.fence,
            self.graphs.checkpointer.serde,
            self.run_journal.sink.emit,
            replaying=self.run.attempt > 1,
        )
        workspaces, thread_id = self.limits.workspaces, self.run.thread_id
        self.sandbox = RunSandbox.of_thread(
            self.run, lambda: workspace_root(workspaces, thread_id), self.run_journal.sink
        )
        self.drive.tool_calls, self.drive.run_journal = self.tool_calls, self.run_journal
        try:
            async with AsyncExitStack() as graph_scope:
                graph = await graph_scope.enter_async_context(self._open_graph())
                await self._execute_graph(graph, graph_scope.aclose)
        finally:  # lost ownership, a failure: a sandbox never outlives its run
            await self._release_sandbox("lease_lost" if self.fence.lost else "ended")

    def _scope(self, gate: WorkspaceGate | None) -> RunScope:
        """This attempt's scope, installed in its graph's config and task (scope.py)."""
        journal, calls, sandbox = self.run_journal, self.tool_calls, self.sandbox
        if journal is None or calls is None or sandbox is None:
            raise RuntimeError("a run's scope needs its journal, tool calls and sandbox")
        return RunScope(
            run_id=self.run.run_id,
            thread_id=self.run.thread_id,
            epoch=self.run.epoch,
            attempt=self.run.attempt,
            owner_id=self.run.owner_id or LOCAL_USER.user_id,
            fence=self.fence,
            limits=self.limits,
            frames=self.sink,
            records=journal.sink,
            tool_calls=calls,
            sandbox=sandbox,
            snapshot_gate=gate,
        )

    async def _release_sandbox(self, reason: str) -> None:
        if self.sandbox is not None:
            await self.sandbox.release_quietly(reason)

    def _open_graph(self) -> AbstractAsyncContextManager[Pregel]:
        """The run's graph; a factory's context manager is held until it is released."""
        owner = self.run.owner_id or LOCAL_USER.user_id
        return self.graphs.open(
            self.run.graph_id,
            "threads.create_run",
            self.config,
            checkpointer=self.checkpointer,
            store=store_of(self.graphs.store, owner, self.limits.store_access),
            user=run_user(self.config, owner, []),
            # The factory sees the whole context, as on LangGraph Platform (its graph's
            # schema is not known before it is built).
            context=graph_context(self.kwargs.get("context"), None, self.limits.secrets_key),
        )

    async def _execute_graph(
        self, graph: Pregel, release_graph: Callable[[], Awaitable[None]]
    ) -> None:
        self.verify_workspace = verifies_workspace(
            self.run.graph_id, graph, self.config, self.limits.role_tools
        )
        # If no file tool asks, nothing changes the workspace and no snapshot is
        # taken: the receipt says so, and delivery's after-snapshot is also the
        # before-snapshot (one walk of the workspace, no extra call).
        self.scope = self._scope(self.workspace.gate() if self.verify_workspace else None)
        outcome = await self.drive.drive(lambda: self._frames(graph), self.scope)
        ending = codec.RUN_STATUS_NAMES.get(outcome.status, RunStatus.ERROR)
        await self._release_sandbox("lease_lost" if self.fence.lost else str(ending))
        if self.fence.lost:
            if self.drive.handed_back:
                STATS.runs_handed_back += 1
            raise StaleEpochError(f"run {self.run.run_id} stopped without finishing")
        rolled_back = outcome.status == common_pb2.RUN_STATUS_INTERRUPTED and (
            self.drive.cancel_action == CancelAction.ROLLBACK
        )
        too_large = isinstance(outcome.error, StateTooLarge)
        if rolled_back or too_large:
            await self._drop_checkpoints()
        elif outcome.status != common_pb2.RUN_STATUS_SUCCESS:
            recorded = await self.tool_calls.recorded_answers() if self.tool_calls else {}
            await answer_dangling_tool_calls(graph, self.run, self.fence, recorded)
        if outcome.error is not None:
            self.sink.emit(*error_event(outcome.error, self.limits.error_tracebacks))
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
        if self.run_journal is not None:
            ending = codec.RUN_STATUS_NAMES.get(outcome.status, RunStatus.ERROR)
            self.run_journal.record_end(ending, outcome.stop_reason, snapshot, self.limits.prices)
        # The last records are stored while admission takes the terminal status: the
        # log closes after both, so whoever follows it to its end sees every record.
        accepted, _ = await asyncio.gather(
            self._report(outcome, snapshot, rolled_back), self._drain_records()
        )
        if accepted:
            await forget_calls(self.store.tool_calls, self.run, self.tool_calls)
            # Not fenced: admission accepted our terminal write, so no newer epoch can
            # exist; a renewal refused meanwhile (the run is no longer active) must not
            # leave the log open and its readers waiting. The journal still checks the epoch.
            # Should we die before this close, admission closes the log after a grace
            # (services/admission/runs/log_closes.py).
            if receipt.webhooks_held:  # released while the streams are closed
                _, self.log_closed = await asyncio.gather(
                    confirm_finished(self.peers, self.run),
                    self.sink.close_ended_patiently(self.peers.outage_seconds),
                )
            else:
                self.log_closed = await self.sink.close_ended_patiently(self.peers.outage_seconds)
            self._leave_after_run(outcome, snapshot, rolled_back)

    async def _flush_journal(self) -> None:
        await self.sink.flush_patiently(self.peers.outage_seconds)

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
            check_state(snapshot.values, self.limits.largest_state_bytes)
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
        if not wants_after_run(self.run.graph_id, self.limits.memory, self.limits.titles):
            return
        values = snapshot.values if isinstance(snapshot.values, dict) else {}
        self.after_run = AfterRun(
            run_id=self.run.run_id,
            epoch=self.run.epoch,
            thread_id=self.run.thread_id,
            user_id=self.run.owner_id or LOCAL_USER.user_id,
            messages=list(values.get("messages") or []),
        )

    async def _start_input(self, graph: Pregel) -> Any:
        """A taken-over run resumes from its own last checkpoint, if it made one."""
        if self.run.attempt > 1:
            latest = await self.graphs.checkpointer.aget_tuple(thread_config(self.run.thread_id))
            if latest is not None and latest.metadata.get("run_id") == self.run.run_id:
                return None
        return graph_input(self.kwargs)

    def _frames(self, graph: Pregel) -> AsyncIterator[list[tuple[str, bytes]]]:
        config = self.config if self.scope is None else self.scope.installed_in(self.config)
        # The journal's records; the budget's watch, after the journal counted a call;
        # with tracing, a span per call; the boundary that holds model calls after a cancel.
        watch = budget_watch(self.scope, self.kwargs, self._token_counts, self.drive.stop_at_budget)
        found = (self.run_journal, watch, call_spans())
        handlers: list[BaseCallbackHandler] = [h for h in found if h is not None]
        if self.tool_calls is not None:
            handlers.append(self.tool_calls.boundary())
        if handlers:
            config = with_callbacks(config, *handlers)
        return graph_frames(
            graph,
            self.kwargs,
            config,
            lambda: self._start_input(graph),
            self.limits.secrets_key,
        )

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

    async def _drain_records(self) -> None:
        if self.run_journal is not None:
            await self.run_journal.sink.drain()

    def _token_counts(self) -> list[TokenCount]:
        if self.run_journal is None:
            return []
        return self.run_journal.ledger.counts(self.limits.prices)

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
