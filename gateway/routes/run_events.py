"""A run's typed journal events (`/events`) and token usage by thread and by user.

The events are the run journal's records (common/run_records.py): model, tool
and graph lifecycle, middleware decisions, delivery and usage. They are kept
beside the run's stream but never sent on it. Oldest first by default
(`order=desc`: newest first); `after` is a cursor: the `seq` of the last event
of the previous page (the `X-Pagination-Next` header when a page is full).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query, Request, Response

from waybill.common import codec
from waybill.gateway.peers import call
from waybill.gateway.response_schemas import error_responses
from waybill.gateway.routes.run_admission import get_run_record
from waybill.gateway.routes.threads import peers_of
from waybill.gateway.schemas import INT32_MAX
from waybill.gateway.streams import INT64_MAX
from waybill.v1 import admission_pb2, journal_pb2

router = APIRouter(tags=["runs"], responses=error_responses())

DEFAULT_PAGE = 100


def requested_types(values: list[str] | None) -> list[str]:
    """`?type=a&type=b` and `?type=a,b` alike."""
    return [name.strip() for value in values or [] for name in value.split(",") if name.strip()]


def event_to_dict(record: journal_pb2.RunRecord) -> dict[str, Any]:
    return {
        "seq": record.seq,
        "type": record.type,
        "created_at": record.created_at,
        "data": codec.loads(record.data, {}),
    }


@router.get("/threads/{thread_id}/runs/{run_id}/events")
async def list_run_events(
    thread_id: UUID,
    run_id: UUID,
    request: Request,
    response: Response,
    types: Annotated[list[str] | None, Query(alias="type")] = None,
    # Only what protobuf cannot carry is refused here; the journal says what it takes.
    limit: Annotated[int, Query(ge=-INT32_MAX - 1, le=INT32_MAX)] = DEFAULT_PAGE,
    offset: Annotated[int, Query(ge=-INT32_MAX - 1, le=INT32_MAX)] = 0,
    after: Annotated[int | None, Query(ge=-INT64_MAX - 1, le=INT64_MAX)] = None,
    order: Literal["asc", "desc"] = "asc",
) -> list[dict[str, Any]]:
    peers = peers_of(request)
    await get_run_record(peers, thread_id, run_id)  # 404 unless the run is the caller's
    wanted = journal_pb2.ListRecordsRequest(
        run_id=str(run_id),
        types=requested_types(types),
        limit=limit,
        offset=offset,
        after=after,
        newest_first=order == "desc",
    )
    reply = await call(peers.journal.ListRecords(wanted))
    if reply.records and len(reply.records) == limit:
        response.headers["X-Pagination-Next"] = str(reply.records[-1].seq)
    return [event_to_dict(record) for record in reply.records]


@router.get("/threads/{thread_id}/token-usage")
async def thread_token_usage(thread_id: UUID, request: Request) -> dict[str, Any]:
    """Tokens every run of the thread spent: totals, by model and by source."""
    reply = await call(
        peers_of(request).admission.GetTokenUsage(
            admission_pb2.GetTokenUsageRequest(thread_id=str(thread_id))
        )
    )
    return {"thread_id": str(thread_id), "runs": reply.runs, **codec.loads(reply.usage_json, {})}


@router.get("/token-usage")
async def user_token_usage(request: Request, owner_id: str = "") -> dict[str, Any]:
    """Tokens the caller's runs spent (an admin may name another user with `owner_id`)."""
    reply = await call(
        peers_of(request).admission.GetTokenUsage(
            admission_pb2.GetTokenUsageRequest(owner_id=owner_id)
        )
    )
    owner = owner_id or request.state.principal.user_id
    return {"owner_id": owner, "runs": reply.runs, **codec.loads(reply.usage_json, {})}
