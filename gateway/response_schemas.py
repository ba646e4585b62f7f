"""What the gateway answers, declared in the OpenAPI document with the wire shape
unchanged: the refusal bodies, the `responses=` of the routes, a run and a thread."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from waybill.common.statuses import MultitaskStrategy, RunStatus, ThreadStatus


class FieldError(BaseModel):
    """One of FastAPI's field errors in a malformed request's 422."""

    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    """A refusal, as LangGraph Platform words one: `{"detail": "<why>"}`; for a request
    that does not fit the envelope (FastAPI's 422), the list of its field errors."""

    detail: str | list[FieldError]


class QuotaRefusalBody(BaseModel):
    """A 429 over a quota: why, which limit, its value, the use found, and the
    seconds until it may pass (as `Retry-After`; null where no wait helps)."""

    detail: str
    limit: str
    value: float
    use: float
    retry_after: float | None


# What any guarded route may answer besides its success, whichever service refuses:
# common/errors.py maps the services' gRPC codes to these; 401/403 are the auth's,
# 413 the request size limit's. Server faults (5xx) are not part of the contract.
REFUSALS: dict[int, str] = {
    400: "Well-formed, but not allowed now or here",
    401: "No valid API key or bearer token",
    403: "The principal may not do this",
    404: "Not found",
    409: "A conflict: the resource exists already, or a race was lost (thread busy)",
    413: "The request body is larger than the gateway takes",
    422: "A malformed request: a field's value is refused",
    429: "Over a quota (the YAML `quotas`): the body names it; Retry-After when waiting helps",
}


# Only where a run's events are read: they were swept (the run ended long ago).
GONE = "The run's events have expired"


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for FastAPI: each status with the `{"detail": …}` body."""
    chosen = statuses or tuple(REFUSALS)
    return {
        status: {
            "model": QuotaRefusalBody if status == 429 else ErrorBody,
            "description": REFUSALS.get(status, GONE),
        }
        for status in chosen
    }


def event_stream(what: str) -> dict[int | str, dict[str, Any]]:
    """`responses=` of a route answering Server-Sent Events; give it `response_class=
    Response` too, so that its refusals stay documented as JSON."""
    return {
        200: {"description": what, "content": {"text/event-stream": {}}},
        **error_responses(410),
    }


def no_body(status: int, what: str) -> dict[int | str, dict[str, Any]]:
    """`responses=` for an answer with a status and nothing else."""
    return {status: {"description": what}}


def protocol_error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """For the protocols that carry their own error envelope (JSON-RPC, A2A, MCP, the
    thread protocol's commands): the status codes, with a JSON object whose shape is
    the protocol's."""
    chosen = statuses or tuple(REFUSALS)
    body = {"application/json": {"schema": {"type": "object"}}}
    return {
        status: {"description": REFUSALS.get(status, "Refused"), "content": body}
        for status in chosen
    }


class Run(BaseModel):
    """A run as the API shows one (`codec.run_to_dict`), in LangGraph Platform's shape
    with one addition, `usage`. Documented only: the wire shape is codec's."""

    run_id: str
    thread_id: str
    assistant_id: str
    created_at: str
    updated_at: str
    status: RunStatus
    metadata: dict[str, Any]
    kwargs: dict[str, Any]
    multitask_strategy: MultitaskStrategy
    langsmith_session_name: None  # no LangSmith tracing project
    usage: dict[str, Any] | None  # token usage once the run has ended


def one_run(what: str) -> dict[int | str, dict[str, Any]]:
    return {200: {"model": Run, "description": what}}


def run_list(what: str) -> dict[int | str, dict[str, Any]]:
    return {200: {"model": list[Run], "description": what}}


class Thread(BaseModel):
    """A thread as the API shows one (`codec.thread_to_dict`), LangGraph Platform's shape.
    Documented only: the wire shape is codec's."""

    thread_id: str
    created_at: str
    updated_at: str
    metadata: dict[str, Any]
    status: ThreadStatus
    values: Any  # the graph's state after the last run; null before any
    interrupts: dict[str, Any]
    # The assistant's, the thread's and the last run's config (configurable: the
    # assistant's and the thread's only), as LangGraph Platform keeps it.
    config: dict[str, Any]
    # `{"error", "message"}` when the last run failed or was cancelled, else null.
    error: dict[str, str] | None
    state_updated_at: str  # creation, a run's end, or an update_state


def one_thread(what: str) -> dict[int | str, dict[str, Any]]:
    return {200: {"model": Thread, "description": what}}
