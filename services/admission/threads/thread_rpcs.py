"""The threads' RPCs: create, read, patch, record a state, delete, search, count."""

from __future__ import annotations

import uuid

import grpc

from waybill.common import codec
from waybill.common.errors import invalid
from waybill.common.identity import acting_user, owner_filter
from waybill.common.secret_scan import refuse_secrets
from waybill.common.statuses import ThreadStatus
from waybill.services.admission.rpc_fields import (
    checked_thread_id,
    json_object,
    one_of,
    page,
    threads_filter,
)
from waybill.services.admission.threads.thread_queries import (
    SORT_KEYS,
    SORT_ORDERS,
    THREAD_STATUSES,
    ThreadQuery,
)
from waybill.services.admission.threads.thread_removal import ThreadRemoval
from waybill.services.admission.threads.thread_store import ThreadStore
from waybill.v1 import admission_pb2, common_pb2


def _thread_query(
    request: admission_pb2.SearchThreadsRequest | admission_pb2.CountThreadsRequest,
) -> ThreadQuery:
    """The filters of a SearchThreads or CountThreads request, checked."""
    query = ThreadQuery(
        metadata=json_object(request.metadata_json, "metadata"),
        values=json_object(request.values_json, "values"),
    )
    if request.status:
        query.status = one_of(request.status, "status", THREAD_STATUSES)
    return query


def _search_query(request: admission_pb2.SearchThreadsRequest) -> ThreadQuery:
    query = _thread_query(request)
    for thread_id in request.ids:
        if not codec.is_uuid(thread_id):
            raise invalid(f"ids: '{thread_id}' is not a UUID.")
    query.ids = list(request.ids)
    query.sort_by = one_of(request.sort_by or "created_at", "sort_by", SORT_KEYS)
    query.sort_order = one_of(request.sort_order or "desc", "sort_order", SORT_ORDERS)
    return query


class ThreadRpcs:
    """Mixed into the admission servicer."""

    threads: ThreadStore
    removal: ThreadRemoval

    async def CreateThread(
        self, request: admission_pb2.CreateThreadRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Thread:
        thread_id = checked_thread_id(request.thread_id) if request.thread_id else str(uuid.uuid4())
        metadata = json_object(request.metadata_json, "metadata")
        refuse_secrets(metadata, None)  # as a run's: metadata is read by every reader
        owner_id = acting_user(context)
        if_exists = one_of(request.if_exists or "raise", "if_exists", ("raise", "do_nothing"))
        ttl = self.threads.ttl_policy.resolve(request.ttl if request.HasField("ttl") else None)
        record = await self.threads.create_thread(thread_id, metadata, if_exists, owner_id, ttl)
        return record.to_proto()

    async def GetThread(
        self, request: admission_pb2.GetThreadRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Thread:
        record = await self.threads.get_thread(
            checked_thread_id(request.thread_id), owner_filter(context), threads_filter(context)
        )
        return record.to_proto()

    async def PatchThread(
        self, request: admission_pb2.PatchThreadRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Thread:
        metadata = json_object(request.metadata_json, "metadata")
        if_absent = json_object(request.metadata_if_absent_json, "metadata_if_absent")
        refuse_secrets({**if_absent, **metadata}, None)  # as a run's: read by every reader
        ttl = self.threads.ttl_policy.resolve(request.ttl) if request.HasField("ttl") else None
        record = await self.threads.patch_thread(
            checked_thread_id(request.thread_id),
            metadata,
            owner_filter(context),
            threads_filter(context),
            if_absent=if_absent,
            ttl=ttl,
        )
        return record.to_proto()

    async def RecordThreadState(
        self, request: admission_pb2.RecordThreadStateRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Thread:
        if request.status not in (ThreadStatus.IDLE, ThreadStatus.INTERRUPTED):
            raise invalid(f"status must be idle or interrupted (got '{request.status}').")
        record = await self.threads.record_thread_state(
            checked_thread_id(request.thread_id),
            json_object(request.values_json, "values"),
            json_object(request.interrupts_json, "interrupts"),
            request.status,
            owner_filter(context),
        )
        return record.to_proto()

    async def DeleteThread(
        self, request: admission_pb2.DeleteThreadRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.DeleteThreadResponse:
        run_ids = await self.removal.delete(
            checked_thread_id(request.thread_id), owner_filter(context), threads_filter(context)
        )
        return admission_pb2.DeleteThreadResponse(run_ids=run_ids)

    async def SearchThreads(
        self, request: admission_pb2.SearchThreadsRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.SearchThreadsResponse:
        query = _search_query(request)
        limit, offset = page(request.limit, request.offset)
        records = await self.threads.search_threads(
            query, limit, offset, owner_filter(context), threads_filter(context)
        )
        return admission_pb2.SearchThreadsResponse(threads=[r.to_proto() for r in records])

    async def CountThreads(
        self, request: admission_pb2.CountThreadsRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.CountThreadsResponse:
        count = await self.threads.count_threads(
            _thread_query(request), owner_filter(context), threads_filter(context)
        )
        return admission_pb2.CountThreadsResponse(count=count)
