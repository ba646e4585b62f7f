"""/runs/crons: schedules that start runs (LangGraph's crons API). Admission owns
them and checks them; this only shapes HTTP."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Request, Response

from waybill.common import codec
from waybill.gateway.peers import call
from waybill.gateway.project_auth import authorize, stamped_metadata
from waybill.gateway.project_http import without_webhook
from waybill.gateway.response_schemas import error_responses
from waybill.gateway.routes.threads import peers_of
from waybill.gateway.run_schemas import CronCount, CronCreate, CronPatch, CronSearch
from waybill.v1 import admission_pb2

router = APIRouter(tags=["crons"], responses=error_responses())


def cron_to_dict(cron: admission_pb2.Cron) -> dict[str, Any]:
    """LangGraph's Cron."""
    return {
        "cron_id": cron.cron_id,
        "assistant_id": cron.assistant_id,
        "thread_id": cron.thread_id or None,
        "on_run_completed": cron.on_run_completed or None,
        "end_time": cron.end_time or None,
        "schedule": cron.schedule,
        "timezone": cron.timezone or None,
        "created_at": cron.created_at,
        "updated_at": cron.updated_at,
        "payload": codec.loads(cron.payload_json, {}),
        "user_id": cron.owner_id or None,
        "next_run_date": cron.next_run_date or None,
        "metadata": codec.loads(cron.metadata_json, {}),
        "enabled": cron.enabled,
    }


async def _authorized_create(
    request: Request, body: CronCreate, thread_id: str = ""
) -> admission_pb2.CreateCronRequest:
    """The project's `crons.create` handler sees the cron (its assistant goes through
    `assistants.read`, and a thread's cron's thread through `threads.read`, as on
    LangGraph Platform); its stamp is stored."""
    value = {
        "payload": body.kwargs(),
        "schedule": body.schedule,
        "cron_id": None,
        "thread_id": thread_id or None,
        "user_id": request.state.principal.user_id,
        "end_time": body.end_time,
        "metadata": dict(body.metadata or {}),
    }
    await authorize(request, "crons", "create", value)
    await authorize(request, "assistants", "read", {"assistant_id": body.assistant_id})
    if thread_id:
        await authorize(request, "threads", "read", {"thread_id": thread_id})
    stamped = body.model_copy(update={"metadata": stamped_metadata(value)})
    return _create_request(stamped, request, thread_id)


def _create_request(
    body: CronCreate, request: Request, thread_id: str = ""
) -> admission_pb2.CreateCronRequest:
    return admission_pb2.CreateCronRequest(
        thread_id=thread_id,
        assistant_id=body.assistant_id,
        schedule=body.schedule,
        timezone=body.timezone or "",
        end_time=codec.iso(body.end_time),
        enabled=body.enabled,
        on_run_completed=body.on_run_completed or "",
        kwargs_json=codec.dumps(without_webhook(body.kwargs(), request.app.state.http)),
        metadata_json=codec.dumps(body.metadata or {}),
        multitask_strategy=codec.MULTITASK_VALUES[body.multitask_strategy or "enqueue"],
    )


@router.post("/runs/crons")
async def create_cron(body: CronCreate, request: Request) -> dict[str, Any]:
    """A cron that runs on a fresh thread each time it fires."""
    cron_request = await _authorized_create(request, body)
    created = await call(peers_of(request).admission.CreateCron(cron_request))
    return cron_to_dict(created)


@router.post("/threads/{thread_id}/runs/crons")
async def create_thread_cron(thread_id: UUID, body: CronCreate, request: Request) -> dict[str, Any]:
    """A cron whose every firing runs on this thread."""
    cron_request = await _authorized_create(request, body, str(thread_id))
    created = await call(peers_of(request).admission.CreateCron(cron_request))
    return cron_to_dict(created)


@router.post("/runs/crons/search")
async def search_crons(body: CronSearch, request: Request) -> list[dict[str, Any]]:
    searched = _search_value(body)  # the handler may add to its metadata
    await authorize(request, "crons", "search", searched)
    reply = await call(
        peers_of(request).admission.SearchCrons(
            admission_pb2.SearchCronsRequest(
                assistant_id=body.assistant_id or "",
                thread_id=str(body.thread_id or ""),
                enabled=body.enabled,
                metadata_json=codec.dumps(stamped_metadata(searched)),
                limit=body.limit,
                offset=body.offset,
                sort_by=body.sort_by or "",
                sort_order=body.sort_order or "",
            )
        )
    )
    found = [cron_to_dict(cron) for cron in reply.crons]
    if body.select:
        found = [{k: v for k, v in cron.items() if k in body.select} for cron in found]
    return found


@router.post("/runs/crons/count")
async def count_crons(body: CronCount, request: Request) -> int:
    searched = _search_value(body)  # the handler may add to its metadata
    await authorize(request, "crons", "search", searched)
    reply = await call(
        peers_of(request).admission.CountCrons(
            admission_pb2.SearchCronsRequest(
                assistant_id=body.assistant_id or "",
                thread_id=str(body.thread_id or ""),
                metadata_json=codec.dumps(stamped_metadata(searched)),
            )
        )
    )
    return int(reply.count)


@router.get("/runs/crons/{cron_id}")
async def get_cron(cron_id: UUID, request: Request) -> dict[str, Any]:
    await authorize(request, "crons", "read", {"cron_id": cron_id})
    found = await call(
        peers_of(request).admission.GetCron(admission_pb2.GetCronRequest(cron_id=str(cron_id)))
    )
    return cron_to_dict(found)


@router.patch("/runs/crons/{cron_id}")
async def update_cron(cron_id: UUID, body: CronPatch, request: Request) -> dict[str, Any]:
    given = body.model_fields_set
    value = {"cron_id": cron_id, "metadata": dict(body.metadata or {})}
    await authorize(request, "crons", "update", value)
    if body.metadata is not None:  # a stamp is stored with the metadata the patch sets
        body = body.model_copy(update={"metadata": stamped_metadata(value)})
    kwargs = without_webhook(body.kwargs(), request.app.state.http)
    patch = admission_pb2.PatchCronRequest(
        cron_id=str(cron_id),
        schedule=body.schedule,
        timezone=body.timezone,
        enabled=body.enabled,
        on_run_completed=body.on_run_completed,
        kwargs_json=codec.dumps(kwargs) if kwargs else b"",
        metadata_json=codec.dumps(body.metadata) if body.metadata is not None else b"",
    )
    if "end_time" in given:  # null clears the end; absent leaves it
        patch.end_time = codec.iso(body.end_time)
    updated = await call(peers_of(request).admission.PatchCron(patch))
    return cron_to_dict(updated)


@router.delete("/runs/crons/{cron_id}", status_code=204)
async def delete_cron(cron_id: UUID, request: Request) -> Response:
    await authorize(request, "crons", "delete", {"cron_id": cron_id})
    await call(
        peers_of(request).admission.DeleteCron(admission_pb2.GetCronRequest(cron_id=str(cron_id)))
    )
    return Response(status_code=204)


def _search_value(body: CronSearch | CronCount) -> dict[str, Any]:
    """What a `crons.search` handler sees (LangGraph's `CronsSearch`)."""
    return {
        "assistant_id": body.assistant_id,
        "thread_id": body.thread_id,
        "metadata": dict(body.metadata or {}),
        "limit": getattr(body, "limit", None),
        "offset": getattr(body, "offset", None),
    }
