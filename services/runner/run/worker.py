"""The runner's side of the `Work` stream.

It says hello, receives runs and cancel orders, has the lease keeper renew the
leases of the runs it executes on a thread of its own (lease_keeper.py: a graph
that blocks this loop costs no other run its lease; a run whose lease is lost is
stopped here), and on shutdown drains: it
takes no new runs, lets running ones finish within the grace period, then
hands the rest back. The stream is reconnected with a configurable delay when
admission goes away; runs already executing carry on while their leases last.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator

import grpc

from waybill.common.readiness import WorkHealth
from waybill.common.settings import Settings
from waybill.common.tracing import run_span
from waybill.services.runner.ending.after_run import after_run_logged
from waybill.services.runner.ending.receipts import confirm_finished
from waybill.services.runner.graphs.registry import GraphRegistry
from waybill.services.runner.peers import RunnerPeers
from waybill.services.runner.persistence.runner_store import RunnerStore
from waybill.services.runner.reporting.frames import as_reported, error_event
from waybill.services.runner.run import node_threads
from waybill.services.runner.run.execution import RunExecution
from waybill.services.runner.run.lease_keeper import LeaseKeeper
from waybill.services.runner.run.outages import DependencyOutage
from waybill.services.runner.run.scope import RunLimits
from waybill.services.runner.stats import STATS
from waybill.v1 import admission_pb2, common_pb2

log = logging.getLogger("waybill.runner.worker")


def new_runner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    def __init__(
        self,
        graphs: GraphRegistry,
        peers: RunnerPeers,
        store: RunnerStore,
        *,
        slots: int,
        settings: Settings,
        work_health: WorkHealth | None = None,
    ) -> None:
        self.graphs = graphs
        self.peers = peers
        self.store = store
        self.slots = slots
        self.settings = settings
        self.limits = RunLimits.from_settings(settings)  # every run's, before its request's own
        self.reconnect_seconds = settings.reconnect_seconds
        self.work_health = work_health or WorkHealth()
        self.runner_id = new_runner_id()
        self.leases = LeaseKeeper(self.runner_id, settings, self._lease_lost)
        self.executions: dict[str, RunExecution] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self._outgoing: asyncio.Queue[admission_pb2.WorkRequest | None] = asyncio.Queue()
        self._draining = False
        self._stopped = asyncio.Event()

    # ---- lifecycle -------------------------------------------------------------

    async def run_forever(self) -> None:
        self.leases.start()
        try:
            while not self._stopped.is_set():
                try:
                    await self._hold_work_stream()
                except grpc.aio.AioRpcError as error:
                    if self._stopped.is_set():
                        return
                    log.warning("work stream lost (%s); reconnecting", error.code().name)
                await asyncio.sleep(self.reconnect_seconds)
        finally:
            await self.leases.stop()

    async def stop(self, grace_seconds: float) -> None:
        """Drain: no new runs; running ones get `grace_seconds`, the rest are handed back."""
        self._draining = True
        self._send(admission_pb2.WorkRequest(draining=admission_pb2.RunnerDraining()))
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=grace_seconds)
        for execution in list(self.executions.values()):
            log.info("handing back run %s", execution.run.run_id)
            execution.hand_back()
            self._send(
                admission_pb2.WorkRequest(
                    released=admission_pb2.RunLease(
                        run_id=execution.run.run_id, epoch=execution.run.epoch
                    )
                )
            )
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=5)
        await asyncio.sleep(0.1)  # let the hand-back messages reach admission
        self._stopped.set()
        self._outgoing.put_nowait(None)

    def _hand_back(self, execution: RunExecution) -> None:
        """Stop without finishing; another attempt resumes the run from its checkpoint."""
        execution.hand_back()
        STATS.runs_handed_back += 1
        lease = admission_pb2.RunLease(run_id=execution.run.run_id, epoch=execution.run.epoch)
        self._send(admission_pb2.WorkRequest(released=lease))

    def _send(self, request: admission_pb2.WorkRequest) -> None:
        self._outgoing.put_nowait(request)

    # ---- the stream --------------------------------------------------------------

    async def _requests(self) -> AsyncIterator[admission_pb2.WorkRequest]:
        slots = 0 if self._draining else self.slots
        yield admission_pb2.WorkRequest(
            hello=admission_pb2.RunnerHello(runner_id=self.runner_id, slots=slots)
        )
        while True:
            request = await self._outgoing.get()
            if request is None:
                return
            yield request

    async def _hold_work_stream(self) -> None:
        call = self.peers.admission.Work(self._requests())
        await call.initial_metadata()  # admission sends it once it has taken our hello
        self.work_health.set_connected(True)
        try:
            await self._follow(call)
        finally:
            self.work_health.set_connected(False)

    async def _follow(self, call: AsyncIterator[admission_pb2.WorkAssignment]) -> None:
        async for assignment in call:
            kind = assignment.WhichOneof("kind")
            if kind == "run":
                self._start(assignment.run, assignment.start_now)
            elif kind == "cancel":
                execution = self.executions.get(assignment.cancel.run_id)
                if execution is not None:
                    execution.cancel(assignment.cancel.action)

    def _start(self, run: common_pb2.Run, start_now: bool) -> None:
        previous = self.executions.get(run.run_id)
        if previous is not None:
            previous.lease_lost()  # we were given it again with a new epoch
        execution = RunExecution(
            run, self.runner_id, self.graphs, self.peers, self.store, self.limits, start_now
        )
        self.executions[run.run_id] = execution
        self.leases.hold(run.run_id, run.epoch, execution.fence)
        task = asyncio.create_task(self._execute(execution), name=run.run_id)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _execute(self, execution: RunExecution) -> None:
        run = execution.run
        with run_span(
            "runner.execute", run.run_id, run.thread_id, run.owner_id, attempt=run.attempt
        ):
            try:
                await execution.execute()
                if execution.log_closed:  # admission owes its log no second close
                    lease = admission_pb2.RunLease(run_id=run.run_id, epoch=run.epoch)
                    self._send(admission_pb2.WorkRequest(log_closed=lease))
                self._after_run(execution)
            except DependencyOutage as error:
                log.warning("run %s: handed back: %s", run.run_id, error)
                self._hand_back(execution)
            except Exception as error:
                log.exception("run %s: infrastructure failure", run.run_id)
                await self._report_failure(execution, error)
            finally:
                node_threads.run_ended(run.run_id)  # a node still executing is stuck now
                self.leases.drop(run.run_id, run.epoch)
                if self.executions.get(run.run_id) is execution:
                    del self.executions[run.run_id]

    def _after_run(self, execution: RunExecution) -> None:
        """The ended run's memory and title, in the background (stop() waits for them
        within its grace, as for runs)."""
        if execution.after_run is None:
            return
        work = after_run_logged(execution.after_run, self.graphs.store, self.peers, self.settings)
        task = asyncio.create_task(work, name=f"after-run:{execution.run.run_id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _report_failure(self, execution: RunExecution, error: Exception) -> None:
        if not execution.fence.held:
            return
        reported = as_reported(error)
        try:  # the run's stream says why (a graph factory that raised, most often)
            execution.sink.emit(*error_event(reported))
            await execution.sink.flush()
        except Exception:
            log.warning("run %s: the failure is not on its stream", execution.run.run_id)
        # The receipt before the terminal status, as for a graph's failure.
        held = await execution.failure_receipt(reported)
        try:
            finished = await self.peers.admission.FinishRun(
                admission_pb2.RunFinished(
                    run_id=execution.run.run_id,
                    runner_id=self.runner_id,
                    epoch=execution.run.epoch,
                    status=common_pb2.RUN_STATUS_ERROR,
                    stop_reason=f"runner failure: {type(error).__name__}: {error}",
                ),
                timeout=self.peers.rpc_timeout,
            )
            if finished.accepted and held:
                await confirm_finished(self.peers, execution.run)
            await execution.sink.close()
        except Exception:
            log.exception("run %s: could not report the failure", execution.run.run_id)

    # ---- leases ------------------------------------------------------------------

    def _lease_lost(self, run_id: str, epoch: int) -> None:
        """The keeper's word (on this loop): the run's lease is lost; stop it."""
        execution = self.executions.get(run_id)
        if execution is not None and execution.run.epoch == epoch:
            execution.lease_lost()
