"""/assistants: create, read, patch (each patch a new version), delete, search and
count assistants; list and choose versions; the drawable graph and schemas of an
assistant's graph. A graph's system assistant is read-only (409 on a change)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response

from waybill.common import codec
from waybill.gateway.peers import call
from waybill.gateway.project_auth import authorize, stamped_metadata
from waybill.gateway.project_http import picked_headers
from waybill.gateway.response_schemas import error_responses
from waybill.gateway.routes.threads import peers_of, remove_thread
from waybill.gateway.schemas import (
    AssistantCount,
    AssistantCreate,
    AssistantPatch,
    AssistantSearch,
    AssistantVersionChange,
    AssistantVersionsSearch,
)
from waybill.v1 import admission_pb2, runner_pb2

# A cascade delete finds the assistant's threads this many at a time.
THREADS_PER_PAGE = 100

router = APIRouter(tags=["assistants"], responses=error_responses())


def version_to_dict(assistant: admission_pb2.Assistant) -> dict[str, Any]:
    """LangGraph's AssistantVersion: an assistant as it was at one version."""
    return {
        "assistant_id": assistant.assistant_id,
        "graph_id": assistant.graph_id,
        "name": assistant.name,
        "description": assistant.description or None,
        "config": codec.loads(assistant.config_json, {}),
        "context": codec.loads(assistant.context_json, {}),
        "metadata": codec.loads(assistant.metadata_json, {}),
        "created_at": assistant.created_at,
        "version": assistant.version,
    }


def assistant_to_dict(assistant: admission_pb2.Assistant) -> dict[str, Any]:
    return {**version_to_dict(assistant), "updated_at": assistant.updated_at}


def _json(value: dict[str, Any] | None) -> bytes:
    """A JSON object for the wire; None (not given) is empty bytes."""
    return codec.dumps(value) if value is not None else b""


async def _assistant(request: Request, assistant_id: str) -> admission_pb2.Assistant:
    await authorize(request, "assistants", "read", {"assistant_id": assistant_id})
    return await call(
        peers_of(request).admission.GetAssistant(
            admission_pb2.GetAssistantRequest(assistant_id=assistant_id)
        )
    )


@router.post("/assistants")
async def create_assistant(body: AssistantCreate, request: Request) -> dict[str, Any]:
    value = {
        "assistant_id": body.assistant_id,
        "graph_id": body.graph_id,
        "config": body.config or {},
        "context": body.context or {},
        "metadata": dict(body.metadata or {}),
        "if_exists": body.if_exists,
        "name": body.name,
        "description": body.description,
    }
    await authorize(request, "assistants", "create", value)
    created = await call(
        peers_of(request).admission.CreateAssistant(
            admission_pb2.CreateAssistantRequest(
                assistant_id=body.assistant_id or "",
                graph_id=body.graph_id,
                config_json=_json(body.config),
                context_json=_json(body.context),
                metadata_json=_json(stamped_metadata(value)),
                name=body.name or "",
                description=body.description or "",
                if_exists=body.if_exists,
            )
        )
    )
    return assistant_to_dict(created)


@router.post("/assistants/search")
async def search_assistants(
    body: AssistantSearch, request: Request, response: Response
) -> list[dict[str, Any]]:
    searched = _search_value(body)  # the handler may add to its metadata
    await authorize(request, "assistants", "search", searched)
    reply = await call(
        peers_of(request).admission.SearchAssistants(
            admission_pb2.SearchAssistantsRequest(
                graph_id=body.graph_id or "",
                metadata_json=_json(stamped_metadata(searched)),
                name=body.name or "",
                limit=body.limit,
                offset=body.offset,
                sort_by=body.sort_by or "",
                sort_order=body.sort_order or "",
            )
        )
    )
    # LangGraph Platform's pagination headers (the SDK reads X-Pagination-Next).
    if reply.has_more:
        next_offset = body.offset + body.limit
        response.headers["X-Pagination-Next"] = str(next_offset)
        response.headers["X-Pagination-Total"] = str(next_offset + 1)
    else:
        response.headers["X-Pagination-Total"] = str(body.offset + len(reply.assistants))
    found = [assistant_to_dict(a) for a in reply.assistants]
    if body.select:
        found = [{k: v for k, v in a.items() if k in body.select} for a in found]
    return found


@router.post("/assistants/count")
async def count_assistants(body: AssistantCount, request: Request) -> int:
    searched = _search_value(body)  # the handler may add to its metadata
    await authorize(request, "assistants", "search", searched)
    reply = await call(
        peers_of(request).admission.CountAssistants(
            admission_pb2.CountAssistantsRequest(
                graph_id=body.graph_id or "",
                metadata_json=_json(stamped_metadata(searched)),
                name=body.name or "",
            )
        )
    )
    return int(reply.count)


@router.patch("/assistants/{assistant_id}")
async def patch_assistant(
    assistant_id: str, body: AssistantPatch, request: Request
) -> dict[str, Any]:
    value: dict[str, Any] = {"assistant_id": assistant_id, "metadata": dict(body.metadata or {})}
    value.update(graph_id=body.graph_id, config=body.config, context=body.context, name=body.name)
    await authorize(request, "assistants", "update", value)
    patched = await call(
        peers_of(request).admission.PatchAssistant(
            admission_pb2.PatchAssistantRequest(
                assistant_id=assistant_id,
                graph_id=body.graph_id or "",
                config_json=_json(body.config),
                context_json=_json(body.context),
                metadata_json=_json(stamped_metadata(value) or body.metadata),
                name=body.name,
                description=body.description,
            )
        )
    )
    return assistant_to_dict(patched)


@router.delete("/assistants/{assistant_id}", status_code=204)
async def delete_assistant(
    assistant_id: str, request: Request, delete_threads: bool = False
) -> Response:
    """With `delete_threads=true`, also the threads whose `metadata.assistant_id` is
    this assistant, as LangGraph Platform does: those the caller may delete (the
    others are skipped, as there)."""
    await authorize(request, "assistants", "delete", {"assistant_id": assistant_id})
    peers = peers_of(request)
    await call(
        peers.admission.DeleteAssistant(
            admission_pb2.DeleteAssistantRequest(assistant_id=assistant_id)
        )
    )
    if delete_threads:
        await _delete_threads_of(request, assistant_id)
    return Response(status_code=204)


async def _delete_threads_of(request: Request, assistant_id: str) -> None:
    peers = peers_of(request)
    searched = {"metadata": {"assistant_id": assistant_id}, "thread_id": None}
    await authorize(request, "threads", "search", searched)
    skipped = 0  # threads left in place come first in the next search: step over them
    while True:
        reply = await call(
            peers.admission.SearchThreads(
                admission_pb2.SearchThreadsRequest(
                    metadata_json=codec.dumps(stamped_metadata(searched)),
                    limit=THREADS_PER_PAGE,
                    offset=skipped,
                    sort_by="created_at",
                    sort_order="asc",
                )
            )
        )
        for thread in reply.threads:
            skipped += 1 - await _delete_if_allowed(request, thread.thread_id)
        if len(reply.threads) < THREADS_PER_PAGE:
            return


async def _delete_if_allowed(request: Request, thread_id: str) -> int:
    try:
        await authorize(request, "threads", "delete", {"thread_id": thread_id})
        await remove_thread(peers_of(request), thread_id)
    except HTTPException as refused:
        if refused.status_code not in (403, 404, 409):
            raise
        return 0  # not the caller's to delete, gone meanwhile, or a run started
    return 1


@router.post("/assistants/{assistant_id}/versions")
async def list_assistant_versions(
    assistant_id: str, body: AssistantVersionsSearch, request: Request
) -> list[dict[str, Any]]:
    await authorize(request, "assistants", "read", {"assistant_id": assistant_id})
    reply = await call(
        peers_of(request).admission.ListAssistantVersions(
            admission_pb2.ListAssistantVersionsRequest(
                assistant_id=assistant_id,
                metadata_json=_json(body.metadata),
                limit=body.limit,
                offset=body.offset,
            )
        )
    )
    return [version_to_dict(v) for v in reply.versions]


@router.post("/assistants/{assistant_id}/latest")
async def set_latest_assistant_version(
    assistant_id: str, body: AssistantVersionChange, request: Request
) -> dict[str, Any]:
    value = {"assistant_id": assistant_id, "version": body.version, "metadata": {}}
    await authorize(request, "assistants", "update", value)
    chosen = await call(
        peers_of(request).admission.SetLatestAssistantVersion(
            admission_pb2.SetLatestAssistantVersionRequest(
                assistant_id=assistant_id, version=body.version
            )
        )
    )
    return assistant_to_dict(chosen)


@router.get("/assistants/{assistant_id}")
async def get_assistant(assistant_id: str, request: Request) -> dict[str, Any]:
    return assistant_to_dict(await _assistant(request, assistant_id))


@router.get("/assistants/{assistant_id}/graph")
async def get_assistant_graph(
    assistant_id: str, request: Request, xray: str | None = None
) -> Response:
    every_level, depth = xray_levels(xray)
    assistant = await _assistant(request, assistant_id)
    reply = await call(
        peers_of(request).runner.GetGraph(
            runner_pb2.GetGraphRequest(
                graph_id=assistant.graph_id,
                xray=every_level,
                xray_depth=depth,
                config_json=_factory_config(request, assistant),
            )
        )
    )
    return Response(reply.json, media_type="application/json")


def xray_levels(xray: str | None) -> tuple[bool, int]:
    """`?xray=` as LangGraph Platform reads it: true/True (every level), false/False
    or absent (none), or a positive number of levels; anything else is a 422."""
    if not xray or xray in ("false", "False"):
        return False, 0
    if xray in ("true", "True"):
        return True, 0
    try:
        depth = int(xray)
    except ValueError:
        depth = 0
    if depth <= 0:
        raise HTTPException(422, "Invalid xray value")
    # No graph nests 2**31 deep: a larger depth draws what int32's largest draws.
    return False, min(depth, 2**31 - 1)


@router.get("/assistants/{assistant_id}/schemas")
async def get_assistant_schemas(assistant_id: str, request: Request) -> Response:
    assistant = await _assistant(request, assistant_id)
    reply = await call(
        peers_of(request).runner.GetSchemas(
            runner_pb2.GetSchemasRequest(
                graph_id=assistant.graph_id, config_json=_factory_config(request, assistant)
            )
        )
    )
    return Response(reply.json, media_type="application/json")


@router.get("/assistants/{assistant_id}/subgraphs")
@router.get("/assistants/{assistant_id}/subgraphs/{namespace}")
async def get_assistant_subgraphs(
    assistant_id: str, request: Request, namespace: str = "", recurse: bool = False
) -> Response:
    assistant = await _assistant(request, assistant_id)
    reply = await call(
        peers_of(request).runner.GetSubgraphs(
            runner_pb2.GetSubgraphsRequest(
                graph_id=assistant.graph_id,
                namespace=namespace,
                recurse=recurse,
                config_json=_factory_config(request, assistant),
            )
        )
    )
    return Response(reply.json, media_type="application/json")


def _factory_config(request: Request, assistant: admission_pb2.Assistant) -> bytes:
    """The config a graph factory is called with to draw or describe the assistant's
    graph, as LangGraph Platform calls it: the assistant's config, and the request
    headers `configurable_headers` picks in its `configurable`."""
    config = codec.loads(assistant.config_json, {})
    picked = picked_headers(request.headers, request.app.state.http)
    config["configurable"] = {**(config.get("configurable") or {}), **picked}
    return codec.dumps(config)


def _search_value(body: AssistantSearch | AssistantCount) -> dict[str, Any]:
    """What an `assistants.search` handler sees (LangGraph's `AssistantsSearch`)."""
    return {
        "graph_id": body.graph_id,
        "metadata": dict(body.metadata or {}),
        "limit": getattr(body, "limit", None),
        "offset": getattr(body, "offset", None),
    }
