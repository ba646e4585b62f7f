"""The runners' side of admission: the `Work` stream (assignments out; lease
renewals, drains and hand-backs in), the start barrier and a run's end."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from waybill.common import codec
from waybill.common.errors import invalid
from waybill.common.statuses import TERMINAL_RUN_STATUSES
from waybill.common.tracing import run_span
from waybill.services.admission import metrics
from waybill.services.admission.rows import RunEnd
from waybill.services.admission.runs.dispatch import RunnerConnection, RunnerPool
from waybill.services.admission.runs.leases import LeaseStore
from waybill.services.admission.runs.log_closes import LogCloser
from waybill.services.admission.usage.usage_rpcs import token_counts_of
from waybill.v1 import admission_pb2

log = logging.getLogger("waybill.admission")


class RunnerRpcs:
    """Mixed into the admission servicer."""

    leases: LeaseStore
    pool: RunnerPool
    log_closer: LogCloser

    async def Work(
        self,
        request_iterator: AsyncIterator[admission_pb2.WorkRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[admission_pb2.WorkAssignment]:
        first = await anext(aiter(request_iterator), None)
        if first is None or first.WhichOneof("kind") != "hello":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "send RunnerHello first")
            return
        connection = self.pool.connect(first.hello.runner_id, first.hello.slots)
        reader = asyncio.create_task(self._read_reports(request_iterator, connection))
        try:
            await context.send_initial_metadata(())  # tells the runner it is connected (readiness)
            while True:
                assignment = await connection.outbox.get()
                if assignment is None:
                    return
                yield assignment
        finally:
            reader.cancel()
            self.pool.disconnect(connection)
            if connection.active:
                try:
                    await asyncio.shield(self.leases.wake_replicas())
                except Exception:  # the stream is gone either way; our own timer still runs
                    log.exception("could not wake the other replicas for %s", connection.runner_id)

    async def _read_reports(
        self, requests: AsyncIterator[admission_pb2.WorkRequest], connection: RunnerConnection
    ) -> None:
        try:
            async for message in requests:
                kind = message.WhichOneof("kind")
                if kind == "renew":
                    leases = [(lease.run_id, lease.epoch) for lease in message.renew.leases]
                    await self.pool.renew(connection, leases)
                elif kind == "draining":
                    self.pool.drain(connection)
                elif kind == "released":
                    await self.leases.release_run(message.released.run_id, message.released.epoch)
                    self.pool.release(connection.runner_id, message.released.run_id)
                elif kind == "log_closed":
                    self.log_closer.closed_by_runner(message.log_closed.run_id)
        except Exception:
            log.exception("work stream of runner %s failed", connection.runner_id)
        finally:
            connection.outbox.put_nowait(None)

    async def RenewLeases(
        self, request: admission_pb2.RenewLeasesRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.LeaseGrant:
        leases = [(lease.run_id, lease.epoch) for lease in request.leases]
        return await self.pool.grant(request.runner_id, leases, request.loop_stalled)

    async def BeginRun(
        self, request: admission_pb2.BeginRunRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.BeginRunResponse:
        with run_span("admission.begin", request.run_id, epoch=request.epoch):
            started, reason = await self.leases.begin_run(
                request.run_id, request.epoch, self.pool.max_attempts
            )
        if reason in ("cancelled", "exhausted"):  # ended here: no FinishRun will follow
            self.pool.release_ended(request.run_id)
            self.log_closer.owed()
        if started:
            metrics.RUNS_STARTED.inc()
        elif reason == "stale":
            metrics.STALE_EPOCH_REFUSED.labels("begin").inc()
        return admission_pb2.BeginRunResponse(started=started, reason=reason)

    async def FinishRun(
        self, request: admission_pb2.RunFinished, context: grpc.aio.ServicerContext
    ) -> admission_pb2.FinishRunResponse:
        status = codec.RUN_STATUS_NAMES.get(request.status)
        if status not in TERMINAL_RUN_STATUSES:
            raise invalid(f"status must be terminal: one of {', '.join(TERMINAL_RUN_STATUSES)}.")
        report = RunEnd(
            run_id=request.run_id,
            epoch=request.epoch,
            status=status,
            stop_reason=request.stop_reason,
            thread_status=request.thread_status or None,
            values=codec.loads(request.values_json, None),
            interrupts=codec.loads(request.interrupts_json, None),
            rolled_back=request.rolled_back,
            token_counts=token_counts_of(request.token_counts),
            error=error_of(request),
        )
        with run_span("admission.finish", request.run_id, status=status, epoch=request.epoch):
            accepted = await self.leases.finish_run(report)
        if accepted:
            metrics.count_tokens(report.token_counts)
            self.log_closer.owed()
        else:
            metrics.STALE_EPOCH_REFUSED.labels("finish").inc()
            log.warning("refused stale finish of run %s (epoch %d)", request.run_id, request.epoch)
        self.pool.release(request.runner_id, request.run_id)
        return admission_pb2.FinishRunResponse(accepted=accepted)

    async def RecordRunUsage(
        self, request: admission_pb2.RunUsageReport, context: grpc.aio.ServicerContext
    ) -> admission_pb2.RecordRunUsageResponse:
        counts = token_counts_of(request.token_counts)
        accepted = await self.leases.record_after_run_usage(request.run_id, request.epoch, counts)
        if accepted:
            metrics.count_tokens(counts)
        else:
            metrics.STALE_EPOCH_REFUSED.labels("after_run").inc()
            log.warning(
                "refused after-run usage of run %s (epoch %d)", request.run_id, request.epoch
            )
        return admission_pb2.RecordRunUsageResponse(accepted=accepted)


def error_of(request: admission_pb2.RunFinished) -> dict[str, Any] | None:
    if not request.HasField("error"):
        return None
    return {"error": request.error.error, "message": request.error.message}
