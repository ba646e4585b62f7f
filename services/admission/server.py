"""The admission gRPC servicer: thin translation between protos and the store."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc

from common import codec
from common.errors import ServiceError, invalid
from common.grpc_server import configure_logging, serve, translate_errors
from common.settings import Settings, get_settings
from common.sql import create_engine
from services.admission.assistants import AssistantCatalog
from services.admission.dispatch import RunnerConnection, RunnerPool
from services.admission.policy import build_run
from services.admission.records import CANCEL_ACTIONS, TERMINAL_STATUSES, RunRecord
from services.admission.store import AdmissionStore, Lease, RunEnd
from services.admission.thread_queries import (
    SORT_KEYS,
    SORT_ORDERS,
    THREAD_STATUSES,
    ThreadQuery,
)
from services.admission.wakeups import WakeupListener
from waybill.v1 import admission_pb2, admission_pb2_grpc

log = logging.getLogger("waybill.admission")


def _json_object(data: bytes, field: str) -> dict[str, Any]:
    value = codec.loads(data, {})
    if not isinstance(value, dict):
        raise invalid(f"{field} must be a JSON object.")
    return value


def _thread_id(value: str) -> str:
    if not codec.is_uuid(value):
        raise invalid(f"thread_id '{value}' is not a UUID.")
    return value


def _one_of(value: str, field: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise invalid(f"{field} must be one of {', '.join(allowed)} (got '{value}').")
    return value


def _thread_query(request: Any) -> ThreadQuery:
    """The filters of a SearchThreads or CountThreads request, checked."""
    query = ThreadQuery(
        metadata=_json_object(request.metadata_json, "metadata"),
        values=_json_object(request.values_json, "values"),
    )
    if request.status:
        query.status = _one_of(request.status, "status", THREAD_STATUSES)
    return query


def _search_query(request: admission_pb2.SearchThreadsRequest) -> ThreadQuery:
    query = _thread_query(request)
    for thread_id in request.ids:
        if not codec.is_uuid(thread_id):
            raise invalid(f"ids: '{thread_id}' is not a UUID.")
    query.ids = list(request.ids)
    query.sort_by = _one_of(request.sort_by or "created_at", "sort_by", SORT_KEYS)
    query.sort_order = _one_of(request.sort_order or "desc", "sort_order", SORT_ORDERS)
    return query


class AdmissionServicer(admission_pb2_grpc.AdmissionServicer):
    def __init__(self, store: AdmissionStore, pool: RunnerPool, settings: Settings) -> None:
        self.store = store
        self.pool = pool
        self.assistants = AssistantCatalog(list(settings.graph_specs()))
        self.allowed_models = [model.name for model in settings.models()]

    # ---- threads -------------------------------------------------------------

    @translate_errors
    async def CreateThread(self, request, context):  # type: ignore[no-untyped-def]
        thread_id = _thread_id(request.thread_id) if request.thread_id else str(uuid.uuid4())
        metadata = _json_object(request.metadata_json, "metadata")
        if_exists = _one_of(request.if_exists or "raise", "if_exists", ("raise", "do_nothing"))
        record = await self.store.create_thread(thread_id, metadata, if_exists)
        return record.to_proto()

    @translate_errors
    async def GetThread(self, request, context):  # type: ignore[no-untyped-def]
        return (await self.store.get_thread(_thread_id(request.thread_id))).to_proto()

    @translate_errors
    async def PatchThread(self, request, context):  # type: ignore[no-untyped-def]
        metadata = _json_object(request.metadata_json, "metadata")
        record = await self.store.patch_thread(_thread_id(request.thread_id), metadata)
        return record.to_proto()

    @translate_errors
    async def DeleteThread(self, request, context):  # type: ignore[no-untyped-def]
        run_ids = await self.store.delete_thread(_thread_id(request.thread_id))
        return admission_pb2.DeleteThreadResponse(run_ids=run_ids)

    @translate_errors
    async def SearchThreads(self, request, context):  # type: ignore[no-untyped-def]
        query = _search_query(request)
        limit = request.limit or 10
        if not 1 <= limit <= 1000:
            raise invalid("limit must be between 1 and 1000.")
        if request.offset < 0:
            raise invalid("offset must not be negative.")
        records = await self.store.search_threads(query, limit, request.offset)
        return admission_pb2.SearchThreadsResponse(threads=[r.to_proto() for r in records])

    @translate_errors
    async def CountThreads(self, request, context):  # type: ignore[no-untyped-def]
        count = await self.store.count_threads(_thread_query(request))
        return admission_pb2.CountThreadsResponse(count=count)

    # ---- runs ----------------------------------------------------------------

    @translate_errors
    async def StartRun(self, request, context):  # type: ignore[no-untyped-def]
        run = build_run(request, self.assistants, self.allowed_models)
        await self._admit(run, request.if_not_exists)
        return run.to_proto()

    @translate_errors
    async def StartRuns(self, request, context):  # type: ignore[no-untyped-def]
        # Every request is checked before any run is stored: a bad one writes nothing.
        built = []
        for index, one in enumerate(request.runs):
            try:
                built.append((build_run(one, self.assistants, self.allowed_models), one))
            except ServiceError as error:
                raise ServiceError(error.code, f"runs[{index}]: {error.message}") from error
        for run, one in built:
            await self._admit(run, one.if_not_exists)
        return admission_pb2.StartRunsResponse(runs=[run.to_proto() for run, _ in built])

    async def _admit(self, run: RunRecord, if_not_exists: str) -> None:
        """Store a built run; claim it for a free runner here at once when it may start."""
        runner = self.pool.reserve_slot(run.run_id)
        lease = Lease(runner.runner_id, self.pool.lease_seconds) if runner else None
        try:
            await self.store.admit_run(run, if_not_exists or "reject", lease)
        finally:
            if runner is not None and run.lease_owner is None:
                self.pool.release(runner.runner_id, run.run_id)  # not claimed: free the slot
        if runner is not None and run.lease_owner is not None:
            self.pool.assign(runner, run, start_now=True)
        # Waiting runs need a claim; a leased one needs the loop's expiry timer; a
        # delayed one needs the loop's start timer.
        self.pool.wake()
        for run_id, action in run.displaced:  # interrupt / rollback strategies
            self.pool.send_cancel(run_id, action)

    @translate_errors
    async def GetRun(self, request, context):  # type: ignore[no-untyped-def]
        record = await self.store.get_run(_thread_id(request.thread_id), request.run_id)
        return record.to_proto()

    @translate_errors
    async def ListRuns(self, request, context):  # type: ignore[no-untyped-def]
        status = codec.RUN_STATUS_NAMES.get(request.status)
        records = await self.store.list_runs(
            _thread_id(request.thread_id), status, request.limit or 10, request.offset
        )
        return admission_pb2.ListRunsResponse(runs=[r.to_proto() for r in records])

    @translate_errors
    async def DeleteRun(self, request, context):  # type: ignore[no-untyped-def]
        await self.store.delete_run(_thread_id(request.thread_id), request.run_id)
        return admission_pb2.DeleteRunResponse()

    # ---- assistants ------------------------------------------------------------

    @translate_errors
    async def SearchAssistants(self, request, context):  # type: ignore[no-untyped-def]
        found = self.assistants.search(request.graph_id, request.limit or 10, request.offset)
        return admission_pb2.SearchAssistantsResponse(assistants=found)

    @translate_errors
    async def GetAssistant(self, request, context):  # type: ignore[no-untyped-def]
        return self.assistants.get(request.assistant_id)

    # ---- the runners' work stream ------------------------------------------------

    async def Work(  # type: ignore[override]
        self, request_iterator: AsyncIterator[admission_pb2.WorkRequest], context: Any
    ) -> AsyncIterator[admission_pb2.WorkAssignment]:
        first = await anext(aiter(request_iterator), None)
        if first is None or first.WhichOneof("kind") != "hello":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "send RunnerHello first")
            return
        connection = self.pool.connect(first.hello.runner_id, first.hello.slots)
        reader = asyncio.create_task(self._read_reports(request_iterator, connection))
        try:
            while True:
                assignment = await connection.outbox.get()
                if assignment is None:
                    return
                yield assignment
        finally:
            reader.cancel()
            self.pool.disconnect(connection)

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
                    await self.store.release_run(message.released.run_id, message.released.epoch)
                    self.pool.release(connection.runner_id, message.released.run_id)
        except Exception:
            log.exception("work stream of runner %s failed", connection.runner_id)
        finally:
            connection.outbox.put_nowait(None)

    @translate_errors
    async def BeginRun(self, request, context):  # type: ignore[no-untyped-def]
        started, reason = await self.store.begin_run(
            request.run_id, request.epoch, self.pool.max_attempts
        )
        if reason in ("cancelled", "exhausted"):  # ended here: no FinishRun will follow
            self.pool.release_ended(request.run_id)
        return admission_pb2.BeginRunResponse(started=started, reason=reason)

    @translate_errors
    async def CancelRun(self, request, context):  # type: ignore[no-untyped-def]
        action = request.action or "interrupt"
        if action not in CANCEL_ACTIONS:
            raise invalid(f"action must be one of {', '.join(CANCEL_ACTIONS)}.")
        run = await self.store.request_cancel(_thread_id(request.thread_id), request.run_id, action)
        # The first action wins: tell the runner the one that was stored.
        if not self.pool.send_cancel(run.run_id, run.cancel_action or action):
            self.pool.wake()  # pending, or its runner is gone: the next claim finalizes it
        return run.to_proto()

    @translate_errors
    async def CancelRuns(self, request, context):  # type: ignore[no-untyped-def]
        action = _one_of(request.action or "interrupt", "action", CANCEL_ACTIONS)
        thread_id, run_ids, status = request.thread_id, list(request.run_ids), request.status
        if status:
            _one_of(status, "status", ("pending", "running", "all"))
            if thread_id or run_ids:
                raise invalid("Give either a status, or a thread_id with run_ids: not both.")
        else:
            if not thread_id or not run_ids:
                raise invalid("Give either a status, or a thread_id with run_ids.")
            _thread_id(thread_id)
            for run_id in run_ids:
                if not codec.is_uuid(run_id):
                    raise invalid(f"run_ids: '{run_id}' is not a UUID.")
        runs = await self.store.request_cancel_many(thread_id, run_ids, status, action)
        for run in runs:
            # The first action wins: tell each runner the one that was stored.
            if not self.pool.send_cancel(run.run_id, run.cancel_action or action):
                self.pool.wake()  # pending, or its runner is gone: the next claim finalizes it
        return admission_pb2.CancelRunsResponse(runs=[run.to_proto() for run in runs])

    @translate_errors
    async def FinishRun(self, request, context):  # type: ignore[no-untyped-def]
        status = codec.RUN_STATUS_NAMES.get(request.status)
        if status not in TERMINAL_STATUSES:
            raise invalid(f"status must be terminal: one of {', '.join(TERMINAL_STATUSES)}.")
        report = RunEnd(
            run_id=request.run_id,
            epoch=request.epoch,
            status=status,
            stop_reason=request.stop_reason,
            thread_status=request.thread_status or None,
            values=codec.loads(request.values_json, None),
            interrupts=codec.loads(request.interrupts_json, None),
            rolled_back=request.rolled_back,
        )
        accepted = await self.store.finish_run(report)
        if not accepted:
            log.warning("refused stale finish of run %s (epoch %d)", request.run_id, request.epoch)
        self.pool.release(request.runner_id, request.run_id)
        return admission_pb2.FinishRunResponse(accepted=accepted)


async def main() -> None:
    settings = get_settings()
    configure_logging("admission")
    store = AdmissionStore(create_engine(settings.sqlalchemy_url("admission")))
    await store.migrate()
    pool = RunnerPool(store, settings.lease_seconds, settings.max_attempts)
    pool.start()
    listener = None
    if settings.database_url:  # other admission replicas may commit work for our runners
        listener = WakeupListener(settings.database_url, pool.wake, pool.send_cancel)
        listener.start()
    servicer = AdmissionServicer(store, pool, settings)

    async def stop() -> None:
        if listener is not None:
            await listener.stop()
        await pool.stop()

    await serve(
        "Admission",
        settings.admission_addr,
        lambda server: admission_pb2_grpc.add_AdmissionServicer_to_server(servicer, server),
        on_stop=stop,
        grace_seconds=settings.shutdown_grace_seconds,
    )
    await store.engine.dispose()


if __name__ == "__main__":
    asyncio.run(main())
