"""/assistants: the system assistant of each graph, its drawable graph and schemas."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from common import codec
from gateway.peers import call
from gateway.routes.threads import peers_of
from gateway.schemas import AssistantSearch
from waybill.v1 import admission_pb2, runner_pb2

router = APIRouter(tags=["assistants"])


def assistant_to_dict(assistant: admission_pb2.Assistant) -> dict[str, Any]:
    return {
        "assistant_id": assistant.assistant_id,
        "graph_id": assistant.graph_id,
        "name": assistant.name,
        "description": assistant.description or None,
        "config": codec.loads(assistant.config_json, {}),
        "context": {},
        "metadata": codec.loads(assistant.metadata_json, {}),
        "created_at": assistant.created_at,
        "updated_at": assistant.updated_at,
        "version": assistant.version,
    }


async def _assistant(request: Request, assistant_id: str) -> admission_pb2.Assistant:
    return await call(
        peers_of(request).admission.GetAssistant(
            admission_pb2.GetAssistantRequest(assistant_id=assistant_id)
        )
    )


@router.post("/assistants/search")
async def search_assistants(body: AssistantSearch, request: Request) -> list[dict[str, Any]]:
    reply = await call(
        peers_of(request).admission.SearchAssistants(
            admission_pb2.SearchAssistantsRequest(
                graph_id=body.graph_id or "", limit=body.limit, offset=body.offset
            )
        )
    )
    return [assistant_to_dict(a) for a in reply.assistants]


@router.get("/assistants/{assistant_id}")
async def get_assistant(assistant_id: str, request: Request) -> dict[str, Any]:
    return assistant_to_dict(await _assistant(request, assistant_id))


@router.get("/assistants/{assistant_id}/graph")
async def get_assistant_graph(assistant_id: str, request: Request, xray: bool = False) -> Response:
    assistant = await _assistant(request, assistant_id)
    reply = await call(
        peers_of(request).runner.GetGraph(
            runner_pb2.GetGraphRequest(graph_id=assistant.graph_id, xray=xray)
        )
    )
    return Response(reply.json, media_type="application/json")


@router.get("/assistants/{assistant_id}/schemas")
async def get_assistant_schemas(assistant_id: str, request: Request) -> Response:
    assistant = await _assistant(request, assistant_id)
    reply = await call(
        peers_of(request).runner.GetSchemas(
            runner_pb2.GetSchemasRequest(graph_id=assistant.graph_id)
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
                graph_id=assistant.graph_id, namespace=namespace, recurse=recurse
            )
        )
    )
    return Response(reply.json, media_type="application/json")
