"""The crons' RPCs: create, read, update, delete, search, count.

A cron's run payload passes every rule of StartRun when the cron is created
or changed (the same `RunIntake.check`, on behalf of the caller), so that a cron
that cannot start its run is refused up front, with nothing written; each
firing then passes them again (see scheduler.py).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import grpc

from waybill.common import codec
from waybill.common.errors import forbidden, invalid, not_found
from waybill.common.identity import (
    LOCAL_USER,
    Principal,
    auth_filter,
    auth_filters,
    caller_of,
    owner_filter,
)
from waybill.common.statuses import DEFAULT_MULTITASK_STRATEGY
from waybill.services.admission.assistants.assistants import AssistantCatalog
from waybill.services.admission.crons.cron_store import SORT_COLUMNS, CronQuery, CronStore
from waybill.services.admission.crons.crons import (
    ON_RUN_COMPLETED,
    CronRecord,
    check_expression,
    checked_schedule,
    parse_end_time,
    parse_time_zone,
)
from waybill.services.admission.crons.schedule_clock import SystemClock
from waybill.services.admission.crons.scheduler import Scheduler
from waybill.services.admission.rpc_fields import json_object
from waybill.services.admission.runs.intake import RunIntake
from waybill.services.admission.runs.policy import SECRETS_KEY
from waybill.v1 import admission_pb2


def _no_sealed_secrets(kwargs: dict[str, Any]) -> None:
    """A cron keeps its payload for later firings; request-scoped secrets are
    sealed per run and never stored in a schedule."""
    context = kwargs.get("context")
    if isinstance(context, dict) and SECRETS_KEY in context:
        raise invalid(
            "context.secrets cannot be stored in a cron: it is for one run's "
            "request-scoped secrets. Give the graph its credentials another way."
        )


def _on_run_completed(value: str, thread_id: str | None) -> str | None:
    if thread_id is not None:
        if value:
            raise invalid(
                "on_run_completed applies to crons without a thread (a fresh thread "
                "per firing); this cron runs on thread " + thread_id + "."
            )
        return None
    value = value or "delete"
    if value not in ON_RUN_COMPLETED:
        raise invalid(f"on_run_completed must be delete or keep (got '{value}').")
    return value


def _probe(cron: CronRecord) -> admission_pb2.StartRunRequest:
    """The StartRun request a firing of `cron` makes (a fresh thread gets a new id)."""
    return admission_pb2.StartRunRequest(
        thread_id=cron.thread_id or str(uuid.uuid4()),
        assistant_id=cron.assistant_id,
        kwargs_json=codec.dumps(cron.kwargs),
        metadata_json=codec.dumps(cron.metadata),
        multitask_strategy=codec.MULTITASK_VALUES[cron.multitask_strategy],
        if_not_exists="reject" if cron.thread_id else "create",
    )


class CronRpcs:
    """Mixed into the admission servicer."""

    cron_store: CronStore
    clock: SystemClock
    assistants: AssistantCatalog
    intake: RunIntake
    scheduler: Scheduler | None

    def _wake_scheduler(self) -> None:
        if self.scheduler is not None:
            self.scheduler.wake()

    async def _checked(
        self, cron: CronRecord, caller: Principal | None, context: grpc.aio.ServicerContext
    ) -> None:
        """Every StartRun rule on the payload, for the caller (and the project's auth
        filters on its thread and assistant); fixes the assistant's id."""
        if caller is not None and not caller.allows("runs:create"):
            # A cron starts runs in its owner's name: no more than the owner may.
            raise forbidden("A cron starts runs: this API key lacks the 'runs:create' scope.")
        _no_sealed_secrets(cron.kwargs)
        if await self.assistants.find(cron.assistant_id) is None:
            # LangGraph Platform: 404 for a cron's unknown assistant, a graph's name included.
            raise not_found(f"Assistant '{cron.assistant_id}' not found.")
        run, _ = await self.intake.check(_probe(cron), caller, auth_filters(context))
        cron.assistant_id = run.assistant_id

    async def CreateCron(
        self, request: admission_pb2.CreateCronRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.Cron:
        caller = caller_of(context) or LOCAL_USER
        now = self.clock.now()
        schedule = checked_schedule(request.schedule, request.timezone, request.end_time, now)
        thread_id = request.thread_id or None
        if thread_id is not None and not codec.is_uuid(thread_id):
            raise invalid(f"thread_id '{thread_id}' is not a UUID.")
        enabled = request.enabled if request.HasField("enabled") else True
        stamp = codec.now_utc()
        cron = CronRecord(
            cron_id=str(uuid.uuid4()),
            assistant_id=request.assistant_id,
            thread_id=thread_id,
            owner_id=caller.user_id,
            schedule=schedule.expression,
            time_zone=request.timezone,
            end_time=schedule.end_time,
            enabled=enabled,
            on_run_completed=_on_run_completed(request.on_run_completed, thread_id),
            kwargs=json_object(request.kwargs_json, "kwargs"),
            metadata=json_object(request.metadata_json, "metadata"),
            multitask_strategy=codec.MULTITASK_NAMES.get(
                request.multitask_strategy, DEFAULT_MULTITASK_STRATEGY
            ),
            next_run_at=schedule.next_after(now),
            created_at=stamp,
            updated_at=stamp,
            owner_role=caller.role,
            owner_scopes=sorted(caller.scopes),
            owner_user=dict(caller.user) if caller.user is not None else None,
            auth_filters=_firing_filters(caller, context),
        )
        await self._checked(cron, caller, context)
        await self.cron_store.insert(cron)
        self._wake_scheduler()
        return cron.to_proto()

    async def GetCron(
        self, request: admission_pb2.GetCronRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.Cron:
        cron = await self.cron_store.get(request.cron_id, owner_filter(context), _crons(context))
        return cron.to_proto()

    async def PatchCron(
        self, request: admission_pb2.PatchCronRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.Cron:
        owner, auth = owner_filter(context), _crons(context)
        cron = await self.cron_store.get(request.cron_id, owner, auth)
        now = self.clock.now()
        timing_changed = self._patch_timing(cron, request, now)
        if request.HasField("on_run_completed"):
            cron.on_run_completed = _on_run_completed(request.on_run_completed, cron.thread_id)
        if request.kwargs_json:
            cron.kwargs = {**cron.kwargs, **json_object(request.kwargs_json, "kwargs")}
        if request.metadata_json:
            cron.metadata = json_object(request.metadata_json, "metadata")
        if timing_changed:
            cron.next_run_at = cron.timing.next_after(now)
        cron.updated_at = codec.now_utc()
        await self._checked(cron, caller_of(context), context)
        await self.cron_store.replace(cron, owner, rescheduled=timing_changed, auth=auth)
        self._wake_scheduler()
        return cron.to_proto()

    def _patch_timing(
        self, cron: CronRecord, request: admission_pb2.PatchCronRequest, now: datetime
    ) -> bool:
        """Apply the schedule fields a patch gives; True when the next firing moves."""
        changed = False
        if request.HasField("schedule"):
            cron.schedule, changed = check_expression(request.schedule), True
        if request.HasField("timezone"):
            parse_time_zone(request.timezone)
            cron.time_zone, changed = request.timezone, True
        if request.HasField("end_time"):
            cron.end_time, changed = parse_end_time(request.end_time, now), True
        if request.HasField("enabled") and request.enabled != cron.enabled:
            # Re-enabled: it resumes from now; what it missed while off is not owed.
            cron.enabled, changed = request.enabled, True
        return changed

    async def DeleteCron(
        self, request: admission_pb2.GetCronRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.DeleteCronResponse:
        await self.cron_store.delete(request.cron_id, owner_filter(context), _crons(context))
        return admission_pb2.DeleteCronResponse()

    async def SearchCrons(
        self, request: admission_pb2.SearchCronsRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.SearchCronsResponse:
        limit = request.limit or 10
        if not 1 <= limit <= 1000:
            raise invalid("limit must be between 1 and 1000.")
        if request.offset < 0:
            raise invalid("offset must not be negative.")
        query = self._cron_query(request)
        query.sort_by = request.sort_by or "created_at"
        if query.sort_by not in SORT_COLUMNS:
            raise invalid(f"sort_by must be one of {', '.join(SORT_COLUMNS)}.")
        query.sort_order = request.sort_order or "desc"
        if query.sort_order not in ("asc", "desc"):
            raise invalid("sort_order must be asc or desc.")
        found = await self.cron_store.search(
            query, limit, request.offset, owner_filter(context), _crons(context)
        )
        return admission_pb2.SearchCronsResponse(crons=[cron.to_proto() for cron in found])

    async def CountCrons(
        self, request: admission_pb2.SearchCronsRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.CountCronsResponse:
        count = await self.cron_store.count(
            self._cron_query(request), owner_filter(context), _crons(context)
        )
        return admission_pb2.CountCronsResponse(count=count)

    def _cron_query(self, request: admission_pb2.SearchCronsRequest) -> CronQuery:
        assistant_id = request.assistant_id
        if assistant_id and not codec.is_uuid(assistant_id):  # a graph's name: its system assistant
            assistant_id = codec.system_assistant_id(assistant_id)
        if request.thread_id and not codec.is_uuid(request.thread_id):
            raise invalid(f"thread_id '{request.thread_id}' is not a UUID.")
        return CronQuery(
            assistant_id=assistant_id,
            thread_id=request.thread_id,
            enabled=request.enabled if request.HasField("enabled") else None,
            metadata=json_object(request.metadata_json, "metadata"),
        )


# The resources whose filters a run's admission applies (intake.check): a cron's
# firing keeps its creator's, as they were at creation.
FIRING_FILTERS = ("threads", "assistants")


def _firing_filters(
    caller: Principal, context: grpc.aio.ServicerContext
) -> dict[str, dict[str, Any]]:
    """The project's auth filters each firing of a new cron runs under: those its
    handlers returned for its creator (`threads.read` on a thread cron's thread,
    `assistants.read` on its assistant). Waybill's own principals have none: their
    owner confines them."""
    if not caller.by_project_auth:
        return {}
    found = auth_filters(context)
    return {resource: found[resource] for resource in FIRING_FILTERS if resource in found}


def _crons(context: grpc.aio.ServicerContext) -> dict[str, Any] | None:
    """The project's auth filter on crons."""
    return auth_filter(context, "crons")
