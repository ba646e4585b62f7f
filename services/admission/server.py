"""The admission gRPC servicer: thin translation between protos and the domain.

Threads' RPCs are in thread_rpcs.py, crons' in cron_rpcs.py, the runners' in
runner_rpcs.py; a run's admission is intake.py's."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack

import grpc
from sqlalchemy.ext.asyncio import AsyncEngine

from waybill.common import codec
from waybill.common.errors import invalid
from waybill.common.grpc_channels import PeerChannels
from waybill.common.grpc_server import configure_logging, run_service, serve
from waybill.common.identity import (
    LOCAL_USER,
    acting_user,
    auth_filter,
    auth_filters,
    caller_of,
    owner_filter,
)
from waybill.common.metrics import ScrapedGauge, register
from waybill.common.settings import Settings, get_settings
from waybill.common.sql import service_engine
from waybill.common.statuses import ACTIVE_RUN_STATUSES, CancelAction
from waybill.common.tracing import run_span
from waybill.services.admission import metrics
from waybill.services.admission.assistants.assistant_store import (
    SORTABLE,
    AssistantFilter,
    AssistantStore,
)
from waybill.services.admission.assistants.assistants import (
    AssistantCatalog,
    AssistantChanges,
    AssistantDraft,
)
from waybill.services.admission.crons.cron_rpcs import CronRpcs
from waybill.services.admission.crons.cron_store import CronStore
from waybill.services.admission.crons.schedule_clock import clock_for
from waybill.services.admission.crons.scheduler import Scheduler
from waybill.services.admission.rows import CANCEL_ACTIONS, RunRow
from waybill.services.admission.rpc_fields import (
    checked_thread_id,
    json_object,
    one_of,
    page,
    threads_filter,
)
from waybill.services.admission.runs.dispatch import RunnerPool
from waybill.services.admission.runs.intake import RunIntake
from waybill.services.admission.runs.leases import LeaseStore
from waybill.services.admission.runs.log_closes import LogCloser, LogCloseStore
from waybill.services.admission.runs.quotas import QuotaGate, principal_asked
from waybill.services.admission.runs.run_store import RunStore
from waybill.services.admission.runs.runner_facts import RunnerFacts
from waybill.services.admission.runs.runner_rpcs import RunnerRpcs
from waybill.services.admission.schema import SCHEMA
from waybill.services.admission.threads.thread_removal import ThreadRemoval
from waybill.services.admission.threads.thread_rpcs import ThreadRpcs
from waybill.services.admission.threads.thread_store import ThreadStore
from waybill.services.admission.threads.thread_ttl import (
    TTLPolicy,
    thread_sweep_loop,
    thread_ttl_policy,
)
from waybill.services.admission.usage.usage_rpcs import token_usage
from waybill.services.admission.wakeups import WakeupListener
from waybill.v1 import admission_pb2, admission_pb2_grpc, common_pb2

log = logging.getLogger("waybill.admission")


class AdmissionServicer(ThreadRpcs, CronRpcs, RunnerRpcs, admission_pb2_grpc.AdmissionServicer):
    def __init__(
        self,
        runs: RunStore,
        leases: LeaseStore,
        removal: ThreadRemoval,
        pool: RunnerPool,
        facts: RunnerFacts,
        settings: Settings,
        log_closer: LogCloser,
    ) -> None:
        self.threads = runs.threads
        self.runs = runs
        self.leases = leases
        self.removal = removal
        self.log_closer = log_closer
        self.cron_store = CronStore(runs.engine)
        self.clock = clock_for(settings.cron_clock_file)
        self.scheduler: Scheduler | None = None  # set by main(); woken by cron changes
        self.pool = pool
        self.settings = settings
        graphs = {graph_id: spec.description for graph_id, spec in settings.graph_specs().items()}
        self.assistants = AssistantCatalog(graphs, AssistantStore(runs.engine))
        self.intake = RunIntake(runs, pool, facts, self.assistants, settings)

    # ---- runs ----------------------------------------------------------------

    async def StartRun(
        self, request: admission_pb2.StartRunRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Run:
        run = await self.intake.start(request, caller_of(context), auth_filters(context))
        return run.to_proto()

    async def StartRuns(
        self, request: admission_pb2.StartRunsRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.StartRunsResponse:
        runs = await self.intake.start_many(request.runs, caller_of(context), auth_filters(context))
        return admission_pb2.StartRunsResponse(runs=[run.to_proto() for run in runs])

    async def GetRun(
        self, request: admission_pb2.GetRunRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Run:
        record = await self.runs.get_run(
            checked_thread_id(request.thread_id),
            request.run_id,
            owner_filter(context),
            threads_filter(context),
        )
        return record.to_proto()

    async def ListRuns(
        self, request: admission_pb2.ListRunsRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.ListRunsResponse:
        status = codec.RUN_STATUS_NAMES.get(request.status)
        records = await self.runs.list_runs(
            checked_thread_id(request.thread_id),
            status,
            request.limit or 10,
            request.offset,
            owner_filter(context),
            threads_filter(context),
        )
        return admission_pb2.ListRunsResponse(runs=[r.to_proto() for r in records])

    async def DeleteRun(
        self, request: admission_pb2.GetRunRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.DeleteRunResponse:
        await self.runs.delete_run(
            checked_thread_id(request.thread_id),
            request.run_id,
            owner_filter(context),
            threads_filter(context),
        )
        return admission_pb2.DeleteRunResponse()

    # ---- assistants ------------------------------------------------------------

    async def SearchAssistants(
        self, request: admission_pb2.SearchAssistantsRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.SearchAssistantsResponse:
        limit, offset = page(request.limit, request.offset)
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

    async def CountAssistants(
        self, request: admission_pb2.CountAssistantsRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.CountAssistantsResponse:
        count = await self.assistants.count(self._assistant_filter(request, context))
        return admission_pb2.CountAssistantsResponse(count=count)

    def _assistant_filter(
        self,
        request: admission_pb2.SearchAssistantsRequest | admission_pb2.CountAssistantsRequest,
        context: grpc.aio.ServicerContext,
    ) -> AssistantFilter:
        metadata = json_object(request.metadata_json, "metadata")
        auth, owner = auth_filter(context, "assistants"), owner_filter(context)
        return self.assistants.filter(request.graph_id, metadata, request.name, auth, owner)

    async def GetAssistant(
        self, request: admission_pb2.GetAssistantRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.Assistant:
        auth, owner = auth_filter(context, "assistants"), owner_filter(context)
        return (await self.assistants.get(request.assistant_id, auth, owner)).to_proto()

    async def CreateAssistant(
        self, request: admission_pb2.CreateAssistantRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.Assistant:
        if_exists = request.if_exists or "raise"
        if if_exists not in ("raise", "do_nothing"):
            raise invalid("if_exists must be raise or do_nothing.")
        draft = AssistantDraft(
            graph_id=request.graph_id,
            config=json_object(request.config_json, "config"),
            context=json_object(request.context_json, "context"),
            metadata=json_object(request.metadata_json, "metadata"),
            assistant_id=request.assistant_id,
            name=request.name,
            description=request.description,
            if_exists=if_exists,
            owner_id=acting_user(context),
        )
        auth, owner = auth_filter(context, "assistants"), owner_filter(context)
        return (await self.assistants.create(draft, auth, owner)).to_proto()

    async def PatchAssistant(
        self, request: admission_pb2.PatchAssistantRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.Assistant:
        changes = AssistantChanges(
            graph_id=request.graph_id or None,
            config=json_object(request.config_json, "config"),
            context=(
                json_object(request.context_json, "context") if request.context_json else None
            ),
            metadata=json_object(request.metadata_json, "metadata"),
            name=request.name if request.HasField("name") else None,
            description=request.description if request.HasField("description") else None,
        )
        auth, owner = auth_filter(context, "assistants"), owner_filter(context)
        patched = await self.assistants.patch(request.assistant_id, changes, auth, owner)
        return patched.to_proto()

    async def DeleteAssistant(
        self, request: admission_pb2.DeleteAssistantRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.DeleteAssistantResponse:
        auth, owner = auth_filter(context, "assistants"), owner_filter(context)
        await self.assistants.delete(request.assistant_id, auth, owner)
        return admission_pb2.DeleteAssistantResponse()

    async def ListAssistantVersions(
        self, request: admission_pb2.ListAssistantVersionsRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.ListAssistantVersionsResponse:
        limit, offset = page(request.limit, request.offset)
        metadata = json_object(request.metadata_json, "metadata")
        auth, owner = auth_filter(context, "assistants"), owner_filter(context)
        found = await self.assistants.versions(
            request.assistant_id, metadata, limit, offset, auth, owner
        )
        return admission_pb2.ListAssistantVersionsResponse(versions=[v.to_proto() for v in found])

    async def SetLatestAssistantVersion(
        self,
        request: admission_pb2.SetLatestAssistantVersionRequest,
        context: grpc.aio.ServicerContext,
    ) -> admission_pb2.Assistant:
        if request.version < 1:
            raise invalid("version must be a positive integer.")
        auth, owner = auth_filter(context, "assistants"), owner_filter(context)
        found = await self.assistants.set_latest(request.assistant_id, request.version, auth, owner)
        return found.to_proto()

    async def CancelRun(
        self, request: admission_pb2.CancelRunRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Run:
        action = request.action or CancelAction.INTERRUPT
        if action not in CANCEL_ACTIONS:
            raise invalid(f"action must be one of {', '.join(CANCEL_ACTIONS)}.")
        with run_span("admission.cancel", request.run_id, request.thread_id, action=action):
            run = await self.runs.request_cancel(
                checked_thread_id(request.thread_id),
                request.run_id,
                action,
                owner_filter(context),
                threads_filter(context),
            )
        # The first action wins: tell the runner the one that was stored.
        if not self.pool.send_cancel(run.run_id, run.cancel_action or action):
            self.pool.wake()  # pending, or its runner is gone: the next claim finalizes it
        await self._rolled_back([run])
        return run.to_proto()

    async def _rolled_back(self, cancelled: list[RunRow]) -> None:
        """A cancel that stands as a rollback answers once its runs' state is rolled
        back and the runs ended (within `rollback_wait_seconds`; run_store.py)."""
        rollbacks = [run.run_id for run in cancelled if run.cancel_action == CancelAction.ROLLBACK]
        if rollbacks:
            await self.runs.until_ended(rollbacks, self.settings.rollback_wait_seconds)

    async def CancelRuns(
        self, request: admission_pb2.CancelRunsRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.CancelRunsResponse:
        action = one_of(request.action or CancelAction.INTERRUPT, "action", CANCEL_ACTIONS)
        thread_id, run_ids, status = request.thread_id, list(request.run_ids), request.status
        if status:
            one_of(status, "status", (*ACTIVE_RUN_STATUSES, "all"))
            if thread_id or run_ids:
                raise invalid("Give either a status, or a thread_id with run_ids: not both.")
        else:
            if not thread_id or not run_ids:
                raise invalid("Give either a status, or a thread_id with run_ids.")
            checked_thread_id(thread_id)
            for run_id in run_ids:
                if not codec.is_uuid(run_id):
                    raise invalid(f"run_ids: '{run_id}' is not a UUID.")
        runs = await self.runs.request_cancel_many(
            thread_id, run_ids, status, action, owner_filter(context), threads_filter(context)
        )
        for run in runs:
            # The first action wins: tell each runner the one that was stored.
            if not self.pool.send_cancel(run.run_id, run.cancel_action or action):
                self.pool.wake()  # pending, or its runner is gone: the next claim finalizes it
        await self._rolled_back(runs)
        return admission_pb2.CancelRunsResponse(runs=[run.to_proto() for run in runs])

    async def GetTokenUsage(
        self, request: admission_pb2.GetTokenUsageRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.TokenUsage:
        return await token_usage(self.threads, request, caller_of(context), threads_filter(context))

    async def GetQuota(
        self, request: admission_pb2.GetQuotaRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.QuotaReport:
        caller = caller_of(context)
        principal_id = principal_asked(request.principal_id, caller)
        gate = self.runs.quotas or QuotaGate(self.settings)
        who = caller or LOCAL_USER
        limits = gate.limits_for(principal_id, who.user_id, who.role)
        report = await gate.report(self.runs.engine, principal_id, limits)
        return admission_pb2.QuotaReport(report_json=codec.dumps(report))


async def main() -> None:
    """Admission until SIGTERM: what it starts is stopped in reverse order (the
    exit stack) before its server drains; its engine is disposed of last."""
    settings = get_settings()
    configure_logging("admission")
    expiry = thread_ttl_policy(settings)  # checkpointer.ttl: a bad one stops start-up here
    engine = service_engine(settings, settings.sqlalchemy_url("admission"))
    async with AsyncExitStack() as running:
        servicer = await _started(settings, engine, expiry, running)
        await serve(
            "Admission",
            settings.admission_addr,
            lambda server: admission_pb2_grpc.add_AdmissionServicer_to_server(servicer, server),
            on_stop=running.aclose,
            grace_seconds=settings.shutdown_grace_seconds,
        )
    await engine.dispose()


async def _started(
    settings: Settings, engine: AsyncEngine, expiry: TTLPolicy, running: AsyncExitStack
) -> AdmissionServicer:
    """The servicer, with its loops started and each one's stop on `running`."""
    # First: it registers SQLite's functions per connection.
    threads = ThreadStore(engine, expiry)
    await SCHEMA.check(engine)  # `waybill migrate` upgrades it, once per deploy
    runs = RunStore(threads, QuotaGate(settings))  # the `quotas` section: a bad one stops start-up
    channels = PeerChannels(settings)  # to the runners, the journal, delivery
    running.push_async_callback(channels.close)
    leases = LeaseStore(engine, settings.log_close_grace_seconds)
    pool = RunnerPool(
        leases, settings.lease_seconds, settings.max_attempts, settings.dispatch_retry_seconds
    )
    pool.start()
    running.push_async_callback(pool.stop)
    log_closer = LogCloser(
        LogCloseStore(engine),
        channels.journal(),
        settings.log_close_grace_seconds,
        settings.log_close_retry_seconds,
        settings.rpc_timeout_seconds,
    )
    log_closer.start()
    running.push_async_callback(log_closer.stop)

    def ended_at_claim(run_id: str) -> None:  # out of attempts: no runner will report it
        pool.release_ended(run_id)
        log_closer.owed()

    leases.on_ended = ended_at_claim
    facts = RunnerFacts(channels.runner_reads(), settings.rpc_timeout_seconds)
    removal = ThreadRemoval(threads, channels, settings.rpc_timeout_seconds)
    servicer = AdmissionServicer(runs, leases, removal, pool, facts, settings, log_closer)
    await servicer.assistants.start()
    scheduler = Scheduler(
        servicer.cron_store,
        servicer.intake.start,
        removal.remove,
        servicer.clock,
        max_sleep=settings.cron_max_sleep_seconds,
        grace_seconds=settings.cron_misfire_grace_seconds,
        missed_policy=settings.cron_missed_firings,
        reclaim_seconds=settings.cron_reclaim_seconds,
    )
    servicer.scheduler = scheduler
    scheduler.start()
    running.push_async_callback(scheduler.stop)
    sweeper = thread_sweep_loop(removal, expiry)  # threads' TTLs: their own or the project's
    sweeper.start()
    running.push_async_callback(sweeper.stop)
    if settings.database_url:  # other admission replicas may commit work (or crons) for us

        def woken() -> None:
            pool.wake()
            log_closer.owed()

        listener = WakeupListener(
            settings.database_url, woken, pool.send_cancel, on_crons=scheduler.wake
        )
        listener.start()
        running.push_async_callback(listener.stop)
    register(ScrapedGauge(asyncio.get_running_loop(), runs.queue_depth, metrics.QUEUE_DOCS))
    return servicer


if __name__ == "__main__":
    run_service(main)
