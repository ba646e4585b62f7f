"""A run through admission: the StartRun request a `RunCreate` body becomes (after
the project's auth has seen it), and a run's record read back. Shared by the
thread-scoped runs, the stateless ones, and the protocols that start runs."""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID, uuid4

from fastapi import Request

from waybill.common import codec
from waybill.common.request_marks import REQUEST_ID_KEY, REQUEST_START_KEY
from waybill.gateway.peers import Peers, call
from waybill.gateway.project_auth import authorize, stamped_metadata
from waybill.gateway.project_http import shape_run
from waybill.gateway.run_schemas import RunCreate
from waybill.v1 import admission_pb2, common_pb2


def idempotency_key(request: Request) -> str:
    return request.headers.get("idempotency-key", "").strip()


def run_request(
    thread_id: str, body: RunCreate, request: Request, key: str = ""
) -> admission_pb2.StartRunRequest:
    kwargs = with_request_marks(
        shape_run(body.kwargs(), request.headers, request.app.state.http), request
    )
    return admission_pb2.StartRunRequest(
        thread_id=thread_id,
        assistant_id=body.assistant_id,
        kwargs_json=codec.dumps(kwargs),
        metadata_json=codec.dumps(body.metadata or {}),
        multitask_strategy=codec.MULTITASK_VALUES[body.multitask_strategy or "enqueue"],
        if_not_exists=body.if_not_exists,
        after_seconds=body.after_seconds or 0,
        idempotency_key=key,
    )


def with_request_marks(kwargs: dict[str, Any], request: Request) -> dict[str, Any]:
    """`configurable.langgraph_request_id` (the request's `x-request-id`, else a new
    id; a client's own value kept) and `__request_start_time_ms__`, as LangGraph
    Platform sets them for every run."""
    config = kwargs.get("config")
    config = dict(config) if isinstance(config, dict) else {}
    configurable = config.get("configurable", {})
    if not isinstance(configurable, dict):
        return kwargs  # refused with its reason by admission
    configurable = dict(configurable)
    if not configurable.get(REQUEST_ID_KEY):
        configurable[REQUEST_ID_KEY] = request.headers.get("x-request-id") or str(uuid4())
    configurable[REQUEST_START_KEY] = int(time.time() * 1000)
    return {**kwargs, "config": {**config, "configurable": configurable}}


async def start_run(
    peers: Peers, thread_id: str, body: RunCreate, request: Request
) -> common_pb2.Run:
    body = await authorized_run(request, thread_id, body)
    request_message = run_request(thread_id, body, request, idempotency_key(request))
    return await call(peers.admission.StartRun(request_message))


async def authorized_run(request: Request, thread_id: str, body: RunCreate) -> Any:
    """The project's `threads.create_run` handler sees the run (LangGraph's
    `RunsCreate`); the metadata it stamps is the run's (and so its thread's). Its
    `assistants.read` handler's filter applies to the run's assistant, unless that
    is a graph's system assistant (admission checks), as on LangGraph Platform."""
    value = {
        "thread_id": thread_id,
        "assistant_id": body.assistant_id,
        "run_id": None,
        "status": "pending",
        "metadata": dict(body.metadata or {}),
        "prevent_insert_if_inflight": True,
        "multitask_strategy": body.multitask_strategy or "enqueue",
        "if_not_exists": body.if_not_exists,
        "after_seconds": body.after_seconds or 0,
        "kwargs": body.kwargs(),
    }
    await authorize(request, "assistants", "read", {"assistant_id": body.assistant_id})
    if await authorize(request, "threads", "create_run", value) is None and value["metadata"] == (
        body.metadata or {}
    ):
        return body
    return body.model_copy(update={"metadata": stamped_metadata(value)})


async def get_run_record(peers: Peers, thread_id: UUID, run_id: UUID) -> common_pb2.Run:
    return await call(
        peers.admission.GetRun(
            admission_pb2.GetRunRequest(thread_id=str(thread_id), run_id=str(run_id))
        )
    )
