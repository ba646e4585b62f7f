"""The admission gRPC servicer: thin translation between protos and the store."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
from sqlalchemy.exc import IntegrityError

from waybill.common import codec
from waybill.common.errors import ServiceError, busy, invalid, refused
from waybill.common.grpc_server import configure_logging, run_service, serve, translate_errors
from waybill.common.identity import (
    LOCAL_USER,
    Principal,
    acting_user,
    auth_filter,
    auth_filters,
    caller_of,
    owner_filter,
)
from waybill.common.metrics import ScrapedGauge, register
from waybill.common.sealed import SecretsUnavailable, secrets_key
from waybill.common.secret_scan import refuse_secrets
from waybill.common.settings import BUILTIN_GRAPHS, Settings, get_settings
from waybill.common.tracing import run_span
from waybill.services.admission import metrics
from waybill.services.admission.assistant_store import SORTABLE, AssistantFilter, AssistantStore
from waybill.services.admission.assistants import AssistantCatalog, AssistantChanges, AssistantDraft
from waybill.services.admission.cron_rpcs import CronRpcs
from waybill.services.admission.cron_store import CronStore
from waybill.services.admission.dispatch import RunnerConnection, RunnerPool
from waybill.services.admission.idempotency import (
    IdempotencyKey,
    KeyedRun,
    key_for,
    replayed_run_id,
)
from waybill.services.admission.log_closes import LogCloser, LogCloseStore
from waybill.services.admission.policy import (
    SECRETS_KEY,
    admitted_kwargs,
    auth_user_of,
    build_run,
    check_webhook,
    identity_of,
    requested_checkpoint,
)
from waybill.services.admission.records import CANCEL_ACTIONS, TERMINAL_STATUSES, RunRecord
from waybill.services.admission.runner_facts import RunnerFacts
from waybill.services.admission.schedule_clock import clock_for
from waybill.services.admission.scheduler import Scheduler
from waybill.services.admission.schema import SCHEMA
from waybill.services.admission.store import AdmissionStore, Lease, RunEnd
from waybill.services.admission.thread_queries import (
    SORT_KEYS,
    SORT_ORDERS,
    THREAD_STATUSES,
    ThreadQuery,
)
from waybill.services.admission.thread_removal import ThreadRemoval
from waybill.services.admission.thread_ttl import ThreadSweeper, thread_ttl
from waybill.services.admission.usage_rpcs import token_counts_of, token_usage
from waybill.services.admission.wakeups import WakeupListener
from waybill.v1 import admission_pb2, admission_pb2_grpc, common_pb2

log = logging.getLogger("waybill.admission")


def _json_object(data: bytes, field: str) -> dict[str, Any]:
    value = codec.loads(data, {})
    if not isinstance(value, dict):
        raise invalid(f"{field} must be a JSON object.")
    return value


def _page(limit: int, offset: int) -> tuple[int, int]:
    limit = limit or 10
    if not 1 <= limit <= 1000:
        raise invalid("limit must be between 1 and 1000.")
    if offset < 0:
        raise invalid("offset must not be negative.")
    return limit, offset


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


def _threads_filter(context: Any) -> dict[str, Any] | None:
    """The project's auth filter on threads (runs are seen through their thread)."""
    return auth_filter(context, "threads")


def _search_query(request: admission_pb2.SearchThreadsRequest) -> ThreadQuery:
    query = _thread_query(request)
    for thread_id in request.ids:
        if not codec.is_uuid(thread_id):
            raise invalid(f"ids: '{thread_id}' is not a UUID.")
    query.ids = list(request.ids)
    query.sort_by = _one_of(request.sort_by or "created_at", "sort_by", SORT_KEYS)
    query.sort_order = _one_of(request.sort_order or "desc", "sort_order", SORT_ORDERS)
    return query


class AdmissionServicer(CronRpcs, admission_pb2_grpc.AdmissionServicer):
    def __init__(
        self,
        store: AdmissionStore,
        pool: RunnerPool,
        facts: RunnerFacts,
        settings: Settings,
        log_closer: LogCloser,
    ) -> None:
        self.store = store
        self.log_closer = log_closer
        self.cron_store = CronStore(store.engine)
        self.clock = clock_for(settings.cron_clock_file)
        self.scheduler: Scheduler | None = None  # set by main(); woken by cron changes
        self.pool = pool
        self.facts = facts
        self.settings = settings
        graphs = {graph_id: spec.description for graph_id, spec in settings.graph_specs().items()}
        self.assistants = AssistantCatalog(graphs, AssistantStore(store.engine))
        self.allowed_models = [model.name for model in settings.models()]
        # The graphs whose model choice is Waybill's: the built-in lead_agent
        # (unless a project serves a graph of its own under that name).
        self.model_graphs = {
            graph_id
            for graph_id, spec in settings.graph_specs().items()
            if spec.target == BUILTIN_GRAPHS["lead_agent"]
        }

    # ---- threads -------------------------------------------------------------

    @translate_errors
    async def CreateThread(self, request, context):  # type: ignore[no-untyped-def]
        thread_id = _thread_id(request.thread_id) if request.thread_id else str(uuid.uuid4())
        metadata = _json_object(request.metadata_json, "metadata")
        refuse_secrets(metadata, None)  # as a run's: metadata is read by every reader
        owner_id = acting_user(context)
        if_exists = _one_of(request.if_exists or "raise", "if_exists", ("raise", "do_nothing"))
        record = await self.store.create_thread(thread_id, metadata, if_exists, owner_id)
        return record.to_proto()

    @translate_errors
    async def GetThread(self, request, context):  # type: ignore[no-untyped-def]
        record = await self.store.get_thread(
            _thread_id(request.thread_id), owner_filter(context), _threads_filter(context)
        )
        return record.to_proto()

    @translate_errors
    async def PatchThread(self, request, context):  # type: ignore[no-untyped-def]
        metadata = _json_object(request.metadata_json, "metadata")
        refuse_secrets(metadata, None)  # as a run's: metadata is read by every reader
        record = await self.store.patch_thread(
            _thread_id(request.thread_id), metadata, owner_filter(context), _threads_filter(context)
        )
        return record.to_proto()

    @translate_errors
    async def RecordThreadState(self, request, context):  # type: ignore[no-untyped-def]
        if request.status not in ("idle", "interrupted"):
            raise invalid(f"status must be idle or interrupted (got '{request.status}').")
        record = await self.store.record_thread_state(
            _thread_id(request.thread_id),
            _json_object(request.values_json, "values"),
            _json_object(request.interrupts_json, "interrupts"),
            request.status,
            owner_filter(context),
        )
        return record.to_proto()

    @translate_errors
    async def DeleteThread(self, request, context):  # type: ignore[no-untyped-def]
        run_ids = await self.store.delete_thread(
            _thread_id(request.thread_id), owner_filter(context), _threads_filter(context)
        )
        return admission_pb2.DeleteThreadResponse(run_ids=run_ids)

    @translate_errors
    async def SearchThreads(self, request, context):  # type: ignore[no-untyped-def]
        query = _search_query(request)
        limit = request.limit or 10
        if not 1 <= limit <= 1000:
            raise invalid("limit must be between 1 and 1000.")
        if request.offset < 0:
            raise invalid("offset must not be negative.")
        records = await self.store.search_threads(
            query, limit, request.offset, owner_filter(context), _threads_filter(context)
        )
        return admission_pb2.SearchThreadsResponse(threads=[r.to_proto() for r in records])

    @translate_errors
    async def CountThreads(self, request, context):  # type: ignore[no-untyped-def]
        count = await self.store.count_threads(
            _thread_query(request), owner_filter(context), _threads_filter(context)
        )
        return admission_pb2.CountThreadsResponse(count=count)

    # ---- runs ----------------------------------------------------------------

    @translate_errors
    async def StartRun(self, request, context):  # type: ignore[no-untyped-def]
        return await self.start_run_as(request, caller_of(context), auth_filters(context))

    async def start_run_as(
        self,
        request: admission_pb2.StartRunRequest,
        caller: Principal | None,
        filters: dict[str, dict[str, Any]] | None = None,
    ) -> common_pb2.Run:
        """StartRun's whole path (idempotency, every rule, the admit) for `caller`:
        an HTTP request's principal, or a cron's owner when it fires. `filters`:
        the project's auth filters by resource (on the thread, the assistant)."""
        user = caller.user_id if caller else LOCAL_USER.user_id
        key = key_for(request, user, self.settings.idempotency_seconds)
        if key is not None:  # a retry gets the run it created, and nothing starts
            found = await self.store.keyed_run(key)
            if found is not None:
                return await self._replay(key, found)
        run, owner = await self._checked_run(request, caller, filters)
        try:
            await self._admit(
                run, request.if_not_exists, owner, key, (filters or {}).get("threads")
            )
        except IntegrityError as error:
            found = await self.store.keyed_run(key) if key else None
            if key is not None and found is not None:
                return await self._replay(key, found)  # a twin with the same key won the race
            raise busy(
                f"Thread {run.thread_id} changed under this request (created or started "
                "concurrently); retry it."
            ) from error
        return run.to_proto()

    @translate_errors
    async def StartRuns(self, request, context):  # type: ignore[no-untyped-def]
        # Every request is checked before any run is stored: a bad one writes nothing.
        caller, filters = caller_of(context), auth_filters(context)
        checked = []
        for index, one in enumerate(request.runs):
            try:
                checked.append((await self._checked_run(one, caller, filters), one))
            except ServiceError as error:
                raise ServiceError(error.code, f"runs[{index}]: {error.message}") from error
        for (run, owner), one in checked:
            await self._admit(run, one.if_not_exists, owner, None, filters.get("threads"))
        return admission_pb2.StartRunsResponse(runs=[run.to_proto() for (run, _), _ in checked])

    async def _checked_run(
        self,
        request: admission_pb2.StartRunRequest,
        caller: Principal | None,
        filters: dict[str, dict[str, Any]] | None = None,
    ) -> tuple[RunRecord, str | None]:
        """Every rule of `policy.py`, in its order; nothing is written.
        Returns the run to store and the owner its caller is confined to."""
        owner = caller.owner_filter if caller else None
        filters = filters or {}
        assistant = await self.assistants.resolve_for_run(
            request.assistant_id, filters.get("assistants"), owner
        )
        allowed_models = self.allowed_models if self._governs_model(assistant.graph_id) else None
        run = build_run(request, assistant, allowed_models, caller)  # checks 1-4
        await check_webhook(run.kwargs, self.settings)  # check 4, the webhook's target
        if_not_exists = request.if_not_exists or "reject"
        thread = await self.store.thread_for_run(
            run.thread_id, owner, if_not_exists, filters.get("threads")
        )  # 5
        owner_id = thread.owner_id if thread else run.owner_id
        identity = identity_of(caller, owner_id)
        run.kwargs = admitted_kwargs(  # check 6
            run.kwargs,
            await self.facts.context_keys(run.graph_id),
            identity,
            auth_user_of(caller, identity),
            self._secrets_key(run.kwargs),
        )
        checkpoint_id = requested_checkpoint(run.kwargs, run.thread_id)  # check 7
        if checkpoint_id:
            graph_id = str(thread.metadata.get("graph_id") or "") if thread else ""
            await self.facts.require_checkpoint(run.thread_id, graph_id, checkpoint_id)
        return run, owner

    async def _replay(self, key: IdempotencyKey, found: KeyedRun) -> common_pb2.Run:
        run_id = replayed_run_id(key, found)
        return (await self.store.get_run(found.thread_id, run_id)).to_proto()

    async def _admit(
        self,
        run: RunRecord,
        if_not_exists: str,
        owner: str | None,
        key: IdempotencyKey | None,
        auth: dict[str, Any] | None = None,
    ) -> None:
        """Store a checked run; claim it for a free runner here at once when it may start."""
        runner = self.pool.reserve_slot(run.run_id)
        lease = Lease(runner.runner_id, self.pool.lease_seconds) if runner else None
        claimed = False
        try:
            with run_span("admission.admit", run.run_id, run.thread_id, run.owner_id):
                await self.store.admit_run(run, if_not_exists or "reject", lease, owner, key, auth)
            claimed = runner is not None and run.lease_owner is not None
        finally:
            if runner is not None and not claimed:
                self.pool.release(runner.runner_id, run.run_id)  # not claimed: free the slot
        metrics.RUNS_ADMITTED.inc()
        if run.lease_owner is not None:  # admitted and started in one write
            metrics.RUNS_STARTED.inc()
            metrics.QUEUE_WAIT.observe(0.0)
        if claimed and runner is not None:
            self.pool.assign(runner, run, start_now=True)
            self.pool.leased_at_admit()  # its lease may need the loop's expiry timer
        else:
            self.pool.wake()  # a waiting run needs a claim; a delayed one, the start timer
        for run_id, action in run.displaced:  # interrupt / rollback strategies
            self.pool.send_cancel(run_id, action)

    def _wake_scheduler(self) -> None:
        if self.scheduler is not None:
            self.scheduler.wake()

    def _governs_model(self, graph_id: str) -> bool:
        return graph_id in self.model_graphs

    def _secrets_key(self, kwargs: dict[str, Any]) -> bytes | None:
        context = kwargs.get("context")
        if not isinstance(context, dict) or SECRETS_KEY not in context:
            return None
        try:
            return secrets_key(self.settings)
        except SecretsUnavailable as error:
            raise refused(str(error)) from error

    @translate_errors
    async def GetRun(self, request, context):  # type: ignore[no-untyped-def]
        record = await self.store.get_run(
            _thread_id(request.thread_id),
            request.run_id,
            owner_filter(context),
            _threads_filter(context),
        )
        return record.to_proto()

    @translate_errors
    async def ListRuns(self, request, context):  # type: ignore[no-untyped-def]
        status = codec.RUN_STATUS_NAMES.get(request.status)
        records = await self.store.list_runs(
            _thread_id(request.thread_id),
            status,
            request.limit or 10,
            request.offset,
            owner_filter(context),
            _threads_filter(context),
        )
        return admission_pb2.ListRunsResponse(runs=[r.to_proto() for r in records])

    @translate_errors
    async def DeleteRun(self, request, context):  # type: ignore[no-untyped-def]
        await self.store.delete_run(
            _thread_id(request.thread_id),
            request.run_id,
            owner_filter(context),
            _threads_filter(context),
        )
        return admission_pb2.DeleteRunResponse()

    # ---- assistants ------------------------------------------------------------

    @translate_errors
    async def SearchAssistants(self, request, context):  # type: ignore[no-untyped-def]
        limit, offset = _page(request.limit, request.offset)
        sort_by = request.sort_by or "created_at"
        if sort_by not in SORTABLE:
            raise invalid(f"sort_by must be one of {', '.join(SORTABLE)}.")
        sort_order = request.sort_order or "desc"
        if sort_order not in ("asc", "desc"):
            raise invalid("sort_order must be asc or desc.")
        wanted = self._assistant_filter(request, context)
        found, has_more = await self.assistants.search(wanted, limit, offset, sort_by, sort_order)
        return admission_pb2.SearchAssistantsResponse(
            assistants=[a.to_proto() for a in found], has_more=has_more
        )

    @translate_errors
    async def CountAssistants(self, request, context):  # type: ignore[no-untyped-def]
        count = await self.assistants.count(self._assistant_filter(request, context))
        return admission_pb2.CountAssistantsResponse(count=count)

    def _assistant_filter(self, request: Any, context: Any) -> AssistantFilter:
        metadata = _json_object(request.metadata_json, "metadata")
        auth, owner = auth_filter(context, "assistants"), owner_filter(context)
        return self.assistants.filter(request.graph_id, metadata, request.name, auth, owner)

    @translate_errors
    async def GetAssistant(self, request, context):  # type: ignore[no-untyped-def]
        auth, owner = auth_filter(context, "assistants"), owner_filter(context)
        return (await self.assistants.get(request.assistant_id, auth, owner)).to_proto()

    @translate_errors
    async def CreateAssistant(self, request, context):  # type: ignore[no-untyped-def]
        if_exists = request.if_exists or "raise"
        if if_exists not in ("raise", "do_nothing"):
            raise invalid("if_exists must be raise or do_nothing.")
        draft = AssistantDraft(
            graph_id=request.graph_id,
            config=_json_object(request.config_json, "config"),
            context=_json_object(request.context_json, "context"),
            metadata=_json_object(request.metadata_json, "metadata"),
            assistant_id=request.assistant_id,
            name=request.name,
            description=request.description,
            if_exists=if_exists,
            owner_id=acting_user(context),
        )
        auth, owner = auth_filter(context, "assistants"), owner_filter(context)
        return (await self.assistants.create(draft, auth, owner)).to_proto()

    @translate_errors
    async def PatchAssistant(self, request, context):  # type: ignore[no-untyped-def]
        changes = AssistantChanges(
            graph_id=request.graph_id or None,
            config=_json_object(request.config_json, "config"),
            context=(
                _json_object(request.context_json, "context") if request.context_json else None
            ),
            metadata=_json_object(request.metadata_json, "metadata"),
            name=request.name if request.HasField("name") else None,
            description=request.description if request.HasField("description") else None,
        )
        auth, owner = auth_filter(context, "assistants"), owner_filter(context)
        patched = await self.assistants.patch(request.assistant_id, changes, auth, owner)
        return patched.to_proto()

    @translate_errors
    async def DeleteAssistant(self, request, context):  # type: ignore[no-untyped-def]
        auth, owner = auth_filter(context, "assistants"), owner_filter(context)
        await self.assistants.delete(request.assistant_id, auth, owner)
        return admission_pb2.DeleteAssistantResponse()

    @translate_errors
    async def ListAssistantVersions(self, request, context):  # type: ignore[no-untyped-def]
        limit, offset = _page(request.limit, request.offset)
        metadata = _json_object(request.metadata_json, "metadata")
        auth, owner = auth_filter(context, "assistants"), owner_filter(context)
        found = await self.assistants.versions(
            request.assistant_id, metadata, limit, offset, auth, owner
        )
        return admission_pb2.ListAssistantVersionsResponse(versions=[v.to_proto() for v in found])

    @translate_errors
    async def SetLatestAssistantVersion(self, request, context):  # type: ignore[no-untyped-def]
        if request.version < 1:
            raise invalid("version must be a positive integer.")
        auth, owner = auth_filter(context, "assistants"), owner_filter(context)
        found = await self.assistants.set_latest(request.assistant_id, request.version, auth, owner)
        return found.to_proto()

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
                    await asyncio.shield(self.store.wake_replicas())
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
                    await self.store.release_run(message.released.run_id, message.released.epoch)
                    self.pool.release(connection.runner_id, message.released.run_id)
        except Exception:
            log.exception("work stream of runner %s failed", connection.runner_id)
        finally:
            connection.outbox.put_nowait(None)

    @translate_errors
    async def BeginRun(self, request, context):  # type: ignore[no-untyped-def]
        with run_span("admission.begin", request.run_id, epoch=request.epoch):
            started, reason = await self.store.begin_run(
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

    @translate_errors
    async def CancelRun(self, request, context):  # type: ignore[no-untyped-def]
        action = request.action or "interrupt"
        if action not in CANCEL_ACTIONS:
            raise invalid(f"action must be one of {', '.join(CANCEL_ACTIONS)}.")
        with run_span("admission.cancel", request.run_id, request.thread_id, action=action):
            run = await self.store.request_cancel(
                _thread_id(request.thread_id),
                request.run_id,
                action,
                owner_filter(context),
                _threads_filter(context),
            )
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
        runs = await self.store.request_cancel_many(
            thread_id, run_ids, status, action, owner_filter(context), _threads_filter(context)
        )
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
            token_counts=token_counts_of(request.token_counts),
        )
        with run_span("admission.finish", request.run_id, status=status, epoch=request.epoch):
            accepted = await self.store.finish_run(report)
        if accepted:
            metrics.count_tokens(report.token_counts)
            self.log_closer.owed()
        else:
            metrics.STALE_EPOCH_REFUSED.labels("finish").inc()
            log.warning("refused stale finish of run %s (epoch %d)", request.run_id, request.epoch)
        self.pool.release(request.runner_id, request.run_id)
        return admission_pb2.FinishRunResponse(accepted=accepted)

    @translate_errors
    async def GetTokenUsage(self, request, context):  # type: ignore[no-untyped-def]
        return await token_usage(self.store, request, caller_of(context), _threads_filter(context))


async def main() -> None:
    settings = get_settings()
    configure_logging("admission")
    expiry = thread_ttl(settings)  # checkpointer.ttl: a bad one stops start-up here
    store = AdmissionStore(
        settings.engine(settings.sqlalchemy_url("admission")), settings.log_close_grace_seconds
    )
    await SCHEMA.check(store.engine)  # `waybill migrate` upgrades it, once per deploy
    pool = RunnerPool(
        store, settings.lease_seconds, settings.max_attempts, settings.dispatch_retry_seconds
    )
    pool.start()
    log_closer = LogCloser(
        LogCloseStore(store.engine),
        settings.journal_addr,
        settings.log_close_grace_seconds,
        settings.log_close_retry_seconds,
        settings.rpc_timeout_seconds,
    )
    log_closer.start()
    facts = RunnerFacts(
        settings.runner_read_target or settings.runner_addr, settings.rpc_timeout_seconds
    )
    servicer = AdmissionServicer(store, pool, facts, settings, log_closer)
    await servicer.assistants.start()
    removal = ThreadRemoval(store, settings)
    scheduler = Scheduler(
        servicer.cron_store,
        servicer.start_run_as,
        removal.remove,
        servicer.clock,
        max_sleep=settings.cron_max_sleep_seconds,
        grace_seconds=settings.cron_misfire_grace_seconds,
        missed_policy=settings.cron_missed_firings,
        reclaim_seconds=settings.cron_reclaim_seconds,
    )
    servicer.scheduler = scheduler
    scheduler.start()
    sweeper = ThreadSweeper(store, removal.remove, expiry) if expiry else None
    if sweeper is not None:
        sweeper.start()
    listener = None
    if settings.database_url:  # other admission replicas may commit work (or crons) for us

        def woken() -> None:
            pool.wake()
            log_closer.owed()

        listener = WakeupListener(
            settings.database_url, woken, pool.send_cancel, on_crons=scheduler.wake
        )
        listener.start()
    register(ScrapedGauge(asyncio.get_running_loop(), store.queue_depth, metrics.QUEUE_DOCS))

    async def stop() -> None:
        if listener is not None:
            await listener.stop()
        await scheduler.stop()
        if sweeper is not None:
            await sweeper.stop()
        await pool.stop()
        await log_closer.stop()
        await facts.close()
        await removal.close()

    await serve(
        "Admission",
        settings.admission_addr,
        lambda server: admission_pb2_grpc.add_AdmissionServicer_to_server(servicer, server),
        on_stop=stop,
        grace_seconds=settings.shutdown_grace_seconds,
    )
    await store.engine.dispose()


if __name__ == "__main__":
    run_service(main)
