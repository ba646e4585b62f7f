"""/memory: what the lead agent remembers about the caller (facts it extracted
after their runs, shown in their next runs' prompt). Each user sees and changes
only their own facts, whoever they are (the runner scopes them by the caller)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from starlette.requests import Request

from waybill.gateway.peers import call
from waybill.gateway.response_schemas import error_responses
from waybill.gateway.routes.threads import peers_of
from waybill.gateway.schemas import MemoryFactBody
from waybill.v1 import runner_pb2

router = APIRouter(tags=["memory"], responses=error_responses())

FactId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z_-]+$")]


def fact_dict(fact: runner_pb2.MemoryFact) -> dict[str, Any]:
    return {
        "fact_id": fact.fact_id,
        "fact": fact.fact,
        "thread_id": fact.thread_id or None,
        "run_id": fact.run_id or None,
        "created_at": fact.created_at,
        "updated_at": fact.updated_at,
    }


@router.get("/memory")
async def list_memory(request: Request) -> dict[str, Any]:
    found = await call(peers_of(request).runner.ListMemory(runner_pb2.ListMemoryRequest()))
    return {"facts": [fact_dict(fact) for fact in found.facts]}


@router.post("/memory", status_code=201)
async def add_fact(body: MemoryFactBody, request: Request) -> dict[str, Any]:
    put = runner_pb2.PutMemoryRequest(fact=body.fact)
    return fact_dict(await call(peers_of(request).runner.PutMemory(put)))


@router.patch("/memory/{fact_id}")
async def edit_fact(fact_id: FactId, body: MemoryFactBody, request: Request) -> dict[str, Any]:
    put = runner_pb2.PutMemoryRequest(fact_id=fact_id, fact=body.fact)
    return fact_dict(await call(peers_of(request).runner.PutMemory(put)))


@router.delete("/memory/{fact_id}", status_code=204)
async def delete_fact(fact_id: FactId, request: Request) -> Response:
    forget = runner_pb2.DeleteMemoryRequest(fact_id=fact_id)
    await call(peers_of(request).runner.DeleteMemory(forget))
    return Response(status_code=204)
