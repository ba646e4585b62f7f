"""The life of one run on a runner.

begin (the start barrier) -> metadata -> astream, journaling every frame ->
settle a cancel (rollback or close dangling tool calls) -> flush the journal ->
receipt -> terminal status -> close the journal. Every durable write is checked
against the run's fence first, so a runner that lost the run writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.pregel import Pregel
from langgraph.types import Command, StateSnapshot

from waybill.common import codec
from waybill.common.identity import LOCAL_USER
from waybill.common.settings import get_settings
from waybill.common.usage import TokenCount, summarize
from waybill.services.runner.agent.workspace import SNAPSHOT_GATES, SnapshotGate
from waybill.services.runner.conversation import closing_answer, unanswered_tool_calls
from waybill.services.runner.deliverables import (
    added_messages,
    has_workspace_tools,
    presented_paths,
)
from waybill.services.runner.fencing import FencedCheckpointer, RunFence, StaleEpochError
from waybill.services.runner.frames import (
    FrameEncoder,
    error_event,
    metadata_event,
    requested_modes,
)
from waybill.services.runner.graph_context import declared_keys, graph_context, with_auth_user
from waybill.services.runner.graphs import GraphRegistry, run_user
from waybill.services.runner.journal_link import JournalLink
from waybill.services.runner.journal_sink import JournalSink
from waybill.services.runner.loop_turns import TURN_EVERY_SECONDS, LoopTurns
from waybill.services.runner.owned_store import store_of
from waybill.services.runner.record_sink import RecordSink
from waybill.services.runner.run_journal import RunJournal, delivery_record, with_callbacks
from waybill.services.runner.stats import STATS
from waybill.services.runner.store import RunnerStore
from waybill.services.runner.token_ledger import token_count_proto
from waybill.v1 import (
    admission_pb2,
    admission_pb2_grpc,
    common_pb2,
    delivery_pb2,
    delivery_pb2_grpc,
    journal_pb2_grpc,
)

log = logging.getLogger("waybill.runner")

CANCELLED_TOOL_REPLY = "Cancelled: the run was interrupted before this tool call finished."


class RunAttemptsExhausted(RuntimeError):
    """Every runner that held the run lost its lease before finishing it."""


class DeliveryFailed(RuntimeError):
    """The graph finished, but delivery could not verify what it delivered."""


@dataclass
class Peers:
    admission: admission_pb2_grpc.AdmissionStub
    journal: journal_pb2_grpc.JournalStub
    delivery: delivery_pb2_grpc.DeliveryStub
    journal_link: JournalLink  # the runner's one append stream, shared by its runs
    # Every call a run makes has a deadline: a peer that hangs fails the call
    # (and the run's attempt) instead of holding the run forever.
    rpc_timeout: float = 30.0


@dataclass
class RunLimits:
    lease_seconds: float
    run_timeout_seconds: float
    record_linger_seconds: float = 0.0


@dataclass
class Outcome:
    status: common_pb2.RunStatus
    error: BaseException | None = None
    stop_reason: str = ""


def run_config(run: common_pb2.Run, kwargs: dict[str, Any]) -> RunnableConfig:
    config: dict[str, Any] = dict(kwargs.get("config") or {})
    configurable = with_auth_user(dict(config.get("configurable") or {}))
    configurable.update(
        thread_id=run.thread_id,
        run_id=run.run_id,
        assistant_id=run.assistant_id,
        graph_id=run.graph_id,
    )
    if kwargs.get("checkpoint_id"):
        configurable["checkpoint_id"] = kwargs["checkpoint_id"]
    config["configurable"] = configurable
    # Stamped on every checkpoint: the database refuses one whose epoch is stale.
    config["metadata"] = {
        **config.get("metadata", {}),
        "run_id": run.run_id,
        "run_epoch": run.epoch,
    }
    if run.attempt <= 1:
        # As LangGraph Platform does: the run's id is the root run's id, which the graph
        # reads as `runtime.execution_info.run_id` (a retry gets a fresh one, for tracing).
        config["run_id"] = uuid.UUID(run.run_id)
    return config  # type: ignore[return-value]


def thread_config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def graph_input(kwargs: dict[str, Any]) -> Any:
    command = kwargs.get("command")
    if command:
        return Command(
            resume=command.get("resume"),
            update=command.get("update"),
            goto=command.get("goto") or (),
        )
    return kwargs.get("input")


def interrupts_of(snapshot: StateSnapshot) -> dict[str, Any]:
    found: dict[str, list[Any]] = {}
    for task in snapshot.tasks:
        if task.interrupts:
            found[task.id] = [{"value": i.value, "id": i.id} for i in task.interrupts]
    return found


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
        self._snapshot: asyncio.Task[None] | None = None  # the workspace's before-snapshot
        self._graph_task: asyncio.Task[Outcome] | None = None
        self.receipt: delivery_pb2.Receipt | None = None  # once written

    # ---- orders from outside -----------------------------------------------------

    def cancel(self, action: str) -> None:
        if self.cancel_action is None:
            self.cancel_action = action
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
        if self._graph_task is not None and not self._graph_task.done():
            self._graph_task.cancel()

    # ---- the run -----------------------------------------------------------------

    async def execute(self) -> None:
        if not self.start_now:
            # Admission did not start it at the claim: ask the barrier what to do.
            begin = await self.peers.admission.BeginRun(
                admission_pb2.BeginRunRequest(run_id=self.run.run_id, epoch=self.run.epoch),
                timeout=self.peers.rpc_timeout,
            )
            if not begin.started:
                await self._not_started(begin.reason)
                return
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

    async def _not_started(self, reason: str) -> None:
        """Nothing is built; the run's log is closed so its streams end.

        Admission has already ended the run under this epoch, so its lease ends
        too (a renewal now reports it lost); closing the log is still this
        epoch's to do, and the journal itself refuses an older epoch."""
        settled = RunFence(self.run.run_id, self.run.epoch, lease_seconds=math.inf)
        peers = self.peers
        sink = JournalSink(
            peers.journal,
            peers.journal_link,
            self.run.run_id,
            self.run.epoch,
            settled,
            peers.rpc_timeout,
        )
        if reason == "cancelled":
            STATS.runs_cancelled_before_start += 1
            log.info("run %s was cancelled before it started", self.run.run_id)
            await sink.close()
            await self._receipt_of_unstarted(common_pb2.RUN_STATUS_INTERRUPTED, None)
        elif reason == "exhausted":
            log.warning("run %s: out of attempts", self.run.run_id)
            message = f"the run was taken over {self.run.attempt - 1} times and gave up"
            failure = RunAttemptsExhausted(message)
            sink.emit(*error_event(failure))
            await sink.flush()
            await sink.close()
            await self._receipt_of_unstarted(common_pb2.RUN_STATUS_ERROR, failure)

    async def _receipt_of_unstarted(
        self, status: common_pb2.RunStatus, error: BaseException | None
    ) -> None:
        """Admission ended the run already; its receipt still tells its webhooks."""
        if await self._receipt_without_state(status, error):
            await self._confirm_finished()

    async def failure_receipt(self, error: BaseException) -> bool:
        """The receipt of a run that failed before it had a graph (a factory that
        raised): written before its terminal status, as every run's is, unless one
        was written already. True when its webhooks wait for `confirm_finished`."""
        if self.receipt is not None:
            return False
        return await self._receipt_without_state(common_pb2.RUN_STATUS_ERROR, error)

    async def confirm_finished(self) -> None:
        await self._confirm_finished()

    async def _receipt_without_state(
        self, status: common_pb2.RunStatus, error: BaseException | None
    ) -> bool:
        """A receipt with no final state; whether its webhooks are held (False when
        it could not be written: the run ends either way)."""
        try:
            receipt = await self.peers.delivery.WriteReceipt(
                delivery_pb2.WriteReceiptRequest(
                    run_id=self.run.run_id,
                    thread_id=self.run.thread_id,
                    epoch=self.run.epoch,
                    outcome=status,
                    final_output_json=b"null",
                    error=common_pb2.RunError(
                        error=type(error).__name__ if error else "",
                        message=str(error) if error else "",
                    ),
                    assistant_id=self.run.assistant_id,
                    webhook=str(self.kwargs.get("webhook") or ""),
                ),
                timeout=self.peers.rpc_timeout,
            )
        except Exception as failure:  # the run ends either way
            log.warning("run %s: no receipt written (%s)", self.run.run_id, failure)
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
        async with AsyncExitStack() as graph_scope:
            graph = await graph_scope.enter_async_context(self._open_graph())
            await self._execute_graph(graph, graph_scope.aclose)

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
        self.verify_workspace = self._verifies_workspace(graph)
        if not self.verify_workspace:
            outcome = await self._drive_with_limits(graph)
        else:
            SNAPSHOT_GATES[self.run.run_id] = self._snapshot_gate()
            try:
                outcome = await self._drive_with_limits(graph)
            finally:
                del SNAPSHOT_GATES[self.run.run_id]
            # If no file tool asked, nothing changed the workspace and no snapshot
            # was taken: the receipt says so, and delivery's after-snapshot is also
            # the before-snapshot (one walk of the workspace, no extra call).
        if self.fence.lost:
            if self.handed_back:
                STATS.runs_handed_back += 1
            raise StaleEpochError(f"run {self.run.run_id} stopped without finishing")
        rolled_back = outcome.status == common_pb2.RUN_STATUS_INTERRUPTED and (
            self.cancel_action == "rollback"
        )
        if rolled_back:
            self.fence.check("rollback")
            await self.graphs.checkpointer.adelete_for_runs([self.run.run_id])
        elif outcome.status != common_pb2.RUN_STATUS_SUCCESS:
            await self._answer_dangling_tool_calls(graph)
        if outcome.error is not None:
            self.sink.emit(*error_event(outcome.error))
        # The end, in the order that makes it provable: journal flushed -> receipt ->
        # terminal status -> journal closed. Reads and records that no step waits
        # for go beside the step before them.
        self.fence.check("journal flush")
        snapshot, (start, started_from), _, _ = await asyncio.gather(
            self._final_state(graph),
            self._state_started_from(graph),
            self.sink.flush(),
            self._snapshot_taken(),  # the receipt compares the workspace with it
        )
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
            await self.sink.flush()
        self._record_the_end(outcome, snapshot)
        # The last records are stored while admission takes the terminal status: the
        # log closes after both, so whoever follows it to its end sees every record.
        accepted, _ = await asyncio.gather(
            self._report(outcome, snapshot, rolled_back), self._drain_records()
        )
        if accepted:
            # Not fenced: admission accepted our terminal write, so no newer epoch can
            # exist; a renewal refused meanwhile (the run is no longer active) must not
            # leave the log open and its readers waiting. The journal still checks the epoch.
            # Should we die before this close, admission closes the log after a grace
            # (services/admission/log_closes.py).
            if receipt.webhooks_held:  # released while the streams are closed
                await asyncio.gather(
                    self._confirm_finished(), self.sink.close(after_terminal_write=True)
                )
            else:
                await self.sink.close(after_terminal_write=True)

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
        turn_due = 0.0  # the first frame goes out at once
        try:
            async for frames in self._frames(graph):
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
            log.info("run %s failed: %s: %s", self.run.run_id, type(error).__name__, error)
            return Outcome(common_pb2.RUN_STATUS_ERROR, error, f"{type(error).__name__}: {error}")
        return Outcome(common_pb2.RUN_STATUS_SUCCESS)

    async def _frames(self, graph: Pregel) -> AsyncIterator[list[tuple[str, bytes]]]:
        """The run's SSE events, from `astream`, or `astream_events` when `events` is asked."""
        stream_mode = self.kwargs.get("stream_mode")
        encoder = FrameEncoder(stream_mode)
        subgraphs = bool(self.kwargs.get("stream_subgraphs"))
        options: dict[str, Any] = {
            "context": graph_context(self.kwargs.get("context"), declared_keys(graph)),
            "stream_mode": requested_modes(stream_mode) or ["values"],
            "subgraphs": subgraphs,
            "interrupt_before": self.kwargs.get("interrupt_before"),
            "interrupt_after": self.kwargs.get("interrupt_after"),
            "durability": self.kwargs.get("durability") or "async",
        }
        graph_input = await self._start_input(graph)
        config = self.config
        if self.run_journal is not None:
            config = with_callbacks(config, self.run_journal)
        if encoder.events:
            events = graph.astream_events(graph_input, config, version="v2", **options)
            async for event in events:
                yield encoder.encode_event(dict(event), subgraphs)
            return
        async for chunk in graph.astream(graph_input, config, **options):
            parts: tuple[Any, ...] = chunk if subgraphs else ((), *chunk)  # type: ignore[assignment]
            namespace, mode, data = parts
            yield encoder.encode(mode, namespace, data)

    async def _final_state(self, graph: Pregel) -> StateSnapshot:
        """The thread's state as the run left it; an empty one when it cannot be read
        (an input the graph refused, e.g. a message of an unknown role, is stored as a
        pending write that no read can apply), so the run still ends as a graph failure."""
        config = thread_config(self.run.thread_id)
        try:
            return await graph.aget_state(config)
        except StaleEpochError:
            raise
        except Exception as error:
            log.info("run %s: its state cannot be read (%s)", self.run.run_id, error)
            return StateSnapshot({}, (), config, None, None, None, (), ())

    async def _answer_dangling_tool_calls(self, graph: Pregel) -> None:
        """A cut-short tool call would poison the thread for every provider: answer it."""
        config = thread_config(self.run.thread_id)
        snapshot = await self._final_state(graph)
        values = snapshot.values if isinstance(snapshot.values, dict) else {}
        calls = unanswered_tool_calls(values.get("messages") or [])
        if not calls:
            return
        replies = [closing_answer(call, CANCELLED_TOOL_REPLY) for call in calls]
        self.fence.check("closing dangling tool calls")
        await graph.aupdate_state(config, {"messages": replies})

    # ---- delivery ----------------------------------------------------------------

    def _verifies_workspace(self, graph: Pregel) -> bool:
        """Whether the run may use workspace tools, so its delivery is verified."""
        context = self.kwargs.get("context")
        role = context.get("role") if isinstance(context, dict) else None
        role_tools = get_settings().role_tools().get(role) if role else None
        configurable = dict(self.config.get("configurable") or {})
        return has_workspace_tools(self.run.graph_id, graph, configurable, role_tools)

    async def _starting_point(self) -> CheckpointTuple | None:
        """The thread's last checkpoint before this run's own: the state the run
        started from (None: a new thread). Usually the graph's own first read."""
        read = self.checkpointer is not None and self.checkpointer.found_read
        found = self.checkpointer.found if self.checkpointer else None
        if read and (found is None or found.metadata.get("run_id") != self.run.run_id):
            return found
        # A takeover: the graph found this run's own checkpoints; look past them.
        root: RunnableConfig = {
            "configurable": {"thread_id": self.run.thread_id, "checkpoint_ns": ""}
        }
        async for earlier in self.graphs.checkpointer.alist(root):
            if earlier.metadata.get("run_id") != self.run.run_id:
                return earlier
        return None

    async def _snapshot_taken(self) -> None:
        if self._snapshot is not None:
            await self._snapshot

    def _snapshot_gate(self) -> SnapshotGate:
        """A gate whose `start` begins the snapshot once, from any thread."""
        loop = asyncio.get_running_loop()

        def begin() -> None:
            if self._snapshot is None:
                self._snapshot = asyncio.create_task(self._snapshot_workspace(gate))

        def start() -> None:
            if threading.get_ident() == loop_thread:
                begin()
            else:
                loop.call_soon_threadsafe(begin)

        loop_thread = threading.get_ident()
        gate = SnapshotGate(start)
        return gate

    async def _snapshot_workspace(self, gate: SnapshotGate) -> None:
        """The workspace before the run changes it (a takeover gets the run's first)."""
        try:
            start = await self._starting_point()
            previous = str(start.metadata.get("run_id") or "") if start else ""
            self.fence.check("workspace snapshot")
            await self.peers.delivery.Snapshot(
                delivery_pb2.SnapshotRequest(
                    run_id=self.run.run_id,
                    thread_id=self.run.thread_id,
                    epoch=self.run.epoch,
                    # A resume continues the paused run: its files written before the pause count.
                    continues_run_id=previous,
                ),
                timeout=self.peers.rpc_timeout,
            )
        except BaseException as error:
            gate.open(failure=f"no snapshot of it could be taken ({type(error).__name__})")
            raise
        gate.open()

    async def _state_started_from(self, graph: Pregel) -> tuple[CheckpointTuple | None, Any]:
        """The checkpoint the run started from and the thread's values then (only
        read when its delivery is verified: the messages it added are where its
        present_files calls are)."""
        if not self.verify_workspace:
            return None, None
        start = await self._starting_point()
        return start, (await graph.aget_state(start.config)).values if start else None

    async def _confirm_finished(self) -> None:
        """Release the run's webhooks now; if this fails, delivery asks admission later."""
        try:
            await self.peers.delivery.ConfirmFinished(
                delivery_pb2.ConfirmFinishedRequest(run_id=self.run.run_id, epoch=self.run.epoch),
                timeout=self.peers.rpc_timeout,
            )
        except Exception as error:  # the outbox settles held webhooks on its own
            STATS.confirmations_failed += 1
            log.warning("run %s: webhooks not confirmed (%s)", self.run.run_id, error)

    # ---- the end -----------------------------------------------------------------

    async def _write_receipt(
        self,
        outcome: Outcome,
        snapshot: StateSnapshot,
        presented: list[str],
        start: CheckpointTuple | None,
    ) -> delivery_pb2.Receipt:
        values = snapshot.values if isinstance(snapshot.values, dict) else {}
        messages = values.get("messages") or []
        last = messages[-1] if messages else None
        final_output = codec.dumps(
            {
                "state_keys": sorted(values),
                "last_message": getattr(last, "content", None),
                "next": list(snapshot.next),
            }
        )
        error = outcome.error
        self.fence.check("receipt")
        paused = outcome.status == common_pb2.RUN_STATUS_SUCCESS and bool(
            interrupts_of(snapshot) or snapshot.next
        )
        receipt: delivery_pb2.Receipt = await self.peers.delivery.WriteReceipt(
            delivery_pb2.WriteReceiptRequest(
                run_id=self.run.run_id,
                thread_id=self.run.thread_id,
                epoch=self.run.epoch,
                outcome=outcome.status,
                final_output_json=final_output,
                error=common_pb2.RunError(
                    error=type(error).__name__ if error else "",
                    message=str(error) if error else "",
                ),
                assistant_id=self.run.assistant_id,
                verify_workspace=self.verify_workspace,
                presented=presented,
                paused=paused,
                webhook=str(self.kwargs.get("webhook") or ""),
                values_json=codec.dumps(snapshot.values or {}),
                usage_json=codec.dumps(summarize(self._token_counts())),
                untouched=self.verify_workspace and self._snapshot is None,
                continues_run_id=str(start.metadata.get("run_id") or "") if start else "",
            ),
            timeout=self.peers.rpc_timeout,
        )
        self.receipt = receipt
        return receipt

    def _record_the_end(self, outcome: Outcome, snapshot: StateSnapshot) -> None:
        """The run's delivery and token usage, as its last records."""
        if self.run_journal is None:
            return
        sink = self.run_journal.sink
        status = codec.RUN_STATUS_NAMES.get(outcome.status, "error")
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
        interrupts = interrupts_of(snapshot)
        if rolled_back:
            thread_status = "idle"
        elif outcome.status == common_pb2.RUN_STATUS_SUCCESS and (interrupts or snapshot.next):
            thread_status = "interrupted"  # paused by interrupt(): waiting for a resume
        else:
            thread_status = ""
        self.fence.check("terminal status")
        STATS.finishes_requested += 1
        reply = await self.peers.admission.FinishRun(
            admission_pb2.RunFinished(
                run_id=self.run.run_id,
                runner_id=self.runner_id,
                epoch=self.run.epoch,
                status=outcome.status,
                stop_reason=outcome.stop_reason,
                values_json=codec.dumps(snapshot.values or {}),
                interrupts_json=codec.dumps(interrupts),
                thread_status=thread_status,
                rolled_back=rolled_back,
                token_counts=[token_count_proto(count) for count in self._token_counts()],
            ),
            timeout=self.peers.rpc_timeout,
        )
        if not reply.accepted:
            STATS.stale_writes_refused += 1
            log.warning("admission refused the end of run %s: it was taken over", self.run.run_id)
        return bool(reply.accepted)
