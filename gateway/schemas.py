"""The API envelope the gateway validates. A graph's `input` is the graph's business."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from waybill.common.statuses import MultitaskStrategy, RunStatus, ThreadStatus
from waybill.gateway.thread_select import MAX_EXTRACT_PATHS, ThreadField

# Counts and positions travel as protobuf int32.
INT32_MAX = 2**31 - 1
Offset = Annotated[int, Field(ge=0, le=INT32_MAX)]

STREAM_MODES = (
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "custom",
    "debug",
    "tasks",
    "checkpoints",
    "events",
)


class Envelope(BaseModel):
    # LangGraph Platform ignores fields it does not know; so do we.
    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _no_nul_characters(cls, data: Any) -> Any:
        where = nul_character_path(data)
        if where is not None:
            raise ValueError(
                f"{where or 'the body'} holds a NUL character (\\u0000), which Waybill's "
                "storage (PostgreSQL's JSON and text) cannot keep"
            )
        return data


def nul_character_path(data: Any) -> str | None:
    """Where in `data` a string (a value or a key) holds NUL, dot-joined; None if nowhere.
    orjson's C encoder answers the common case (no NUL at all) at once."""
    try:
        if b"\\u0000" not in orjson.dumps(data):
            return None
    except (TypeError, orjson.JSONEncodeError):
        pass  # not plain JSON (an integer beyond 64 bits...): look at every part
    pending: list[tuple[str, Any]] = [("", data)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, str) and "\x00" in value:
            return path
        if isinstance(value, dict):
            for key, item in value.items():
                shown = str(key).replace("\x00", "\\u0000")
                inner = f"{path}.{shown}" if path else shown
                if isinstance(key, str) and "\x00" in key:
                    return inner
                pending.append((inner, item))
        elif isinstance(value, list | tuple):
            pending.extend((f"{path}[{index}]", item) for index, item in enumerate(value))
    return None


def configurable_is_an_object(config: dict[str, Any] | None) -> dict[str, Any] | None:
    if config is not None and not isinstance(config.get("configurable", {}), dict):
        raise ValueError("config.configurable must be a JSON object")
    return config


def checkpoint_id_is_a_string(checkpoint: dict[str, Any] | None) -> dict[str, Any] | None:
    """A checkpoint given as a dict (or a config holding one): its id is a string."""
    if checkpoint is None:
        return None
    inner = checkpoint.get("configurable", checkpoint)
    found = inner.get("checkpoint_id") if isinstance(inner, dict) else None
    if found is not None and not isinstance(found, str):
        raise ValueError("checkpoint_id must be a string (a checkpoint's id)")
    return checkpoint


# What LangGraph's SQL stores take as a filter key (a JSON path, dot-separated).
FilterKey = Annotated[str, Field(pattern=r"^[a-zA-Z0-9_.-]+$")]
RunConfig = Annotated[dict[str, Any], AfterValidator(configurable_is_an_object)]
# A checkpoint as a dict or as a config holding one (`{"configurable": {...}}`).
CheckpointDict = Annotated[
    dict[str, Any],
    AfterValidator(configurable_is_an_object),
    AfterValidator(checkpoint_id_is_a_string),
]


class SendTarget(BaseModel):
    """A `Send`: `node` runs with `input` (which may be null, but must be given)."""

    node: str
    input: Any


class CommandShape(BaseModel):
    """LangGraph Platform's `Command` schema: `goto` is one or a list of names or of
    `Send`s, `update` an object or a list (of key/value pairs)."""

    update: dict[str, Any] | list[Any] | None = None
    resume: Any = None
    goto: str | SendTarget | list[str] | list[SendTarget] | None = None


def command_is_well_formed(command: dict[str, Any] | None) -> dict[str, Any] | None:
    """Kept as sent (the run's kwargs); refused here rather than failing the run."""
    if command is None:
        return None
    try:
        CommandShape.model_validate(command)
    except ValidationError as error:
        field = error.errors()[0]["loc"][0]
        raise ValueError(f"command.{field} is malformed: {COMMAND_FIELDS[str(field)]}") from None
    return command


COMMAND_FIELDS = {
    "goto": 'a node\'s name, a Send ({"node", "input"}), or a list of names or of Sends',
    "update": "an object, or a list of [key, value] pairs",
}


RunCommand = Annotated[dict[str, Any], AfterValidator(command_is_well_formed)]


class SuperstepUpdate(Envelope):
    """One write of a superstep: `values`, or a `command` ({"update", "goto"}), as `as_node`."""

    values: dict[str, Any] | list[Any] | None = None
    command: RunCommand | None = None
    as_node: str


class Superstep(Envelope):
    updates: list[SuperstepUpdate] = Field(min_length=1)


def _not_null(value: Any) -> Any:
    """As LangGraph Platform's schema: a field may be left out, never sent as null."""
    if value is None:
        raise ValueError("must not be null: leave it out instead")
    return value


class ThreadTTLBody(Envelope):
    """LangGraph Platform's `ttl` of a thread create or update: the thread expires
    `ttl` minutes after its last refresh (see services/admission/thread_ttl.py).
    Without `ttl`, the project's checkpointer.ttl.default_ttl (none: no expiry)."""

    strategy: Literal["delete", "keep_latest"] = "delete"
    ttl: float | None = Field(default=None, strict=True, allow_inf_nan=False)

    _present = field_validator("strategy", "ttl", mode="before")(_not_null)


class ThreadCreate(Envelope):
    thread_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    if_exists: Literal["raise", "do_nothing"] = "raise"
    # The state to start from, as supersteps of updates (the SDK's copy between servers).
    supersteps: list[Superstep] | None = Field(default=None, max_length=1000)
    ttl: ThreadTTLBody | None = None

    _present = field_validator("ttl", mode="before")(_not_null)


class ThreadPatch(Envelope):
    metadata: dict[str, Any] = Field(default_factory=dict)
    ttl: ThreadTTLBody | None = None

    _present = field_validator("ttl", mode="before")(_not_null)


class ThreadCount(Envelope):
    metadata: dict[str, Any] | None = None
    # Containment on the thread's values after its last run.
    values: dict[str, Any] | None = None
    status: ThreadStatus | None = None


class ThreadSearch(ThreadCount):
    ids: list[UUID] | None = Field(default=None, max_length=1000)
    # Only these fields of each thread; values picked out by path, under `extracted`.
    select: list[ThreadField] | None = None
    extract: dict[str, str] | None = Field(default=None, max_length=MAX_EXTRACT_PATHS)
    limit: int = Field(default=10, ge=1, le=1000)
    offset: Offset = 0
    sort_by: (
        Literal["thread_id", "status", "created_at", "updated_at", "state_updated_at"] | None
    ) = None
    sort_order: Literal["asc", "desc"] | None = None


class CheckpointConfig(Envelope):
    """LangGraph Platform's `CheckpointConfig`: which checkpoint of which (sub)graph.
    Its `thread_id` is ignored: the path names the thread."""

    thread_id: str | None = None
    checkpoint_ns: str | None = None
    checkpoint_id: str | None = None
    # A subgraph checkpoint's parents, by namespace: ids, as LangGraph writes them.
    checkpoint_map: dict[str, str] | None = None


class ThreadHistory(Envelope):
    # Strict, as the platform's schema: "5" or true is not a count.
    limit: StrictInt = Field(default=1, ge=1, le=1000)  # the platform's default (the SDK sends 10)
    before: str | CheckpointDict | None = None
    # Keys as LangGraph's SQL savers take them (SQLite's refuses others with a 500).
    metadata: dict[FilterKey, Any] | None = None
    # Whose history: a subgraph's namespace (a state task's `checkpoint`); default the root.
    checkpoint: CheckpointConfig | None = None


class ThreadStateAtCheckpoint(Envelope):
    checkpoint: CheckpointConfig
    subgraphs: StrictBool = False


class ThreadStateUpdate(Envelope):
    values: dict[str, Any] | list[Any] | None = None
    as_node: str | None = None
    checkpoint_id: str | None = None
    checkpoint: CheckpointConfig | None = None


class ThreadPrune(Envelope):
    thread_ids: list[UUID] = Field(max_length=1000)
    # keep_latest keeps the thread and the newest checkpoint of each of its namespaces.
    strategy: Literal["delete", "keep_latest"] = "delete"


MAX_START_DELAY_SECONDS = 365 * 24 * 3600  # as admission's policy

# The SDK joins labels with "."; LangGraph's stores refuse NUL in one.
Label = Annotated[str, Field(min_length=1, pattern=r"^[^.\x00]+$")]


class StoreItemPut(Envelope):
    namespace: list[Label] = Field(min_length=1)
    key: str = Field(min_length=1)
    value: dict[str, Any]
    index: Literal[False] | list[str] | None = None
    ttl: float | None = Field(default=None, gt=0)


class StoreItemDelete(Envelope):
    namespace: list[Label] = Field(min_length=1)
    key: str = Field(min_length=1)


class MemoryFactBody(Envelope):
    """`POST /memory`, `PATCH /memory/{fact_id}`: a fact's text."""

    fact: str = Field(min_length=1, max_length=1000)


class StoreSearch(Envelope):
    namespace_prefix: list[Label] = Field(default_factory=list)
    filter: dict[FilterKey, Any] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: Offset = 0
    query: str | None = None
    refresh_ttl: bool | None = None


class StoreNamespaces(Envelope):
    prefix: list[Label] | None = None
    suffix: list[Label] | None = None
    # LangGraph's PostgresStore adds to it in SQL, as a 32-bit integer.
    max_depth: int | None = Field(default=None, ge=1, le=INT32_MAX - 2)
    limit: int = Field(default=100, ge=1, le=1000)
    offset: Offset = 0


AssistantField = Literal[
    "assistant_id",
    "graph_id",
    "name",
    "description",
    "config",
    "context",
    "created_at",
    "updated_at",
    "metadata",
    "version",
]


class AssistantCreate(Envelope):
    graph_id: str = Field(min_length=1)
    assistant_id: str | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] = "raise"
    name: str | None = None
    description: str | None = None


class AssistantPatch(Envelope):
    """Only what is given changes; metadata is merged into the stored metadata."""

    graph_id: str | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    name: str | None = None
    description: str | None = None


class AssistantCount(Envelope):
    graph_id: str | None = None
    metadata: dict[str, Any] | None = None
    name: str | None = None


class AssistantSearch(AssistantCount):
    limit: int = Field(default=10, ge=1, le=1000)
    offset: Offset = 0
    sort_by: Literal["assistant_id", "graph_id", "name", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[AssistantField] | None = None


class AssistantVersionsSearch(Envelope):
    metadata: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: Offset = 0


class AssistantVersionChange(Envelope):
    version: int = Field(ge=1, le=INT32_MAX)


class RunCreate(Envelope):
    assistant_id: str = Field(min_length=1)
    input: Any = None
    command: RunCommand | None = None
    metadata: dict[str, Any] | None = None
    config: RunConfig | None = None
    context: dict[str, Any] | None = None
    checkpoint_id: str | None = None
    checkpoint: CheckpointDict | None = None
    stream_mode: str | list[str] = "values"
    stream_subgraphs: bool = False
    stream_resumable: bool = False  # every Waybill stream is resumable
    interrupt_before: Literal["*"] | list[str] | None = None
    interrupt_after: Literal["*"] | list[str] | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None
    if_not_exists: Literal["create", "reject"] = "reject"
    on_disconnect: Literal["cancel", "continue"] = "continue"
    # Stateless runs (/runs/...): drop the temporary thread when done, or keep it.
    on_completion: Literal["delete", "keep"] = "delete"
    # Wait this long before the run may start; it stays `pending` meanwhile.
    after_seconds: float | None = Field(default=None, ge=0, le=MAX_START_DELAY_SECONDS)
    # Told of the run's end by delivery's outbox (signed POST, retried; see docs/api.md).
    webhook: str | None = Field(default=None, max_length=2048)
    feedback_keys: list[str] | None = None
    # LangGraph's default: a step's checkpoint is stored while the next step
    # runs (a takeover may redo one step); "sync" waits for it before each step.
    durability: Literal["sync", "async", "exit"] = "async"

    @field_validator("stream_mode")
    @classmethod
    def _known_modes(cls, value: str | list[str]) -> str | list[str]:
        for mode in [value] if isinstance(value, str) else value:
            if mode not in STREAM_MODES:
                known = ", ".join(STREAM_MODES)
                raise ValueError(f"unknown stream_mode '{mode}'; use one of {known}")
        return value

    def kwargs(self) -> dict[str, Any]:
        """What the run record keeps as LangGraph's `kwargs`."""
        fields = (
            "input",
            "command",
            "config",
            "context",
            "checkpoint_id",
            "checkpoint",
            "stream_mode",
            "stream_subgraphs",
            "interrupt_before",
            "interrupt_after",
            "on_disconnect",
            "feedback_keys",
            "durability",
            "webhook",
        )
        kwargs = {name: getattr(self, name) for name in fields}
        if self.checkpoint and not self.checkpoint_id:
            kwargs["checkpoint_id"] = self.checkpoint.get("checkpoint_id")
        # Kept so that an Idempotency-Key's digest covers every field of the request.
        kwargs["resumable"] = self.stream_resumable
        kwargs["on_completion"] = self.on_completion
        return kwargs


class RunsCancel(Envelope):
    """`POST /runs/cancel`: the listed runs of one thread, or every run in a status."""

    thread_id: UUID | None = None
    run_ids: list[UUID] | None = Field(default=None, min_length=1, max_length=1000)
    status: Literal["pending", "running", "all"] | None = None

    @model_validator(mode="after")
    def _one_selection(self) -> RunsCancel:
        by_ids = self.thread_id is not None or self.run_ids is not None
        if self.status is not None and by_ids:
            raise ValueError(
                "give either status, or thread_id with run_ids: status cancels every run "
                "in that status, whatever its thread"
            )
        if self.status is None and (self.thread_id is None or not self.run_ids):
            raise ValueError("give either status, or both thread_id and run_ids")
        return self


class BatchRunCreate(RunCreate):
    """One run of `POST /runs/batch`: on the thread it names, or stateless without one."""

    thread_id: UUID | None = None


CronSortBy = Literal[
    "cron_id", "assistant_id", "thread_id", "created_at", "updated_at", "next_run_date", "end_time"
]
CronField = Literal[
    "cron_id",
    "assistant_id",
    "thread_id",
    "end_time",
    "schedule",
    "timezone",
    "created_at",
    "updated_at",
    "user_id",
    "payload",
    "next_run_date",
    "metadata",
    "now",
    "on_run_completed",
    "enabled",
]


class CronRunFields(Envelope):
    """The run each firing starts (the schedule itself is admission's to check)."""

    input: Any = None
    config: RunConfig | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    stream_mode: str | list[str] | None = None
    stream_subgraphs: bool | None = None
    stream_resumable: bool | None = None  # every Waybill stream is resumable
    interrupt_before: Literal["*"] | list[str] | None = None
    interrupt_after: Literal["*"] | list[str] | None = None
    durability: Literal["sync", "async", "exit"] | None = None
    checkpoint_during: bool | None = None  # deprecated by LangGraph: durability says it
    webhook: str | None = None

    @field_validator("stream_mode")
    @classmethod
    def _known_modes(cls, value: str | list[str] | None) -> str | list[str] | None:
        for mode in [value] if isinstance(value, str) else value or []:
            if mode not in STREAM_MODES:
                known = ", ".join(STREAM_MODES)
                raise ValueError(f"unknown stream_mode '{mode}'; use one of {known}")
        return value

    def kwargs(self) -> dict[str, Any]:
        """The run kwargs a firing uses: only the fields given."""
        names = (
            "input",
            "config",
            "context",
            "stream_mode",
            "stream_subgraphs",
            "interrupt_before",
            "interrupt_after",
            "durability",
            "webhook",
        )
        return {name: getattr(self, name) for name in names if name in self.model_fields_set}


class CronCreate(CronRunFields):
    assistant_id: str = Field(min_length=1)
    schedule: str = Field(min_length=1)
    timezone: str | None = None
    end_time: datetime | None = None
    enabled: bool | None = None
    on_run_completed: Literal["delete", "keep"] | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None


class CronPatch(CronRunFields):
    """Only what is given changes; `end_time: null` clears the end."""

    schedule: str | None = None
    timezone: str | None = None
    end_time: datetime | None = None
    enabled: bool | None = None
    on_run_completed: Literal["delete", "keep"] | None = None


class CronCount(Envelope):
    assistant_id: str | None = None
    thread_id: UUID | None = None
    metadata: dict[str, Any] | None = None


class CronSearch(CronCount):
    enabled: bool | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: Offset = 0
    sort_by: CronSortBy | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[CronField] | None = None


# ---- what the gateway answers: declared in the OpenAPI, the wire shape unchanged ----


class FieldError(BaseModel):
    """One of FastAPI's field errors in a malformed request's 422."""

    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    """A refusal, as LangGraph Platform words one: `{"detail": "<why>"}`; for a request
    that does not fit the envelope (FastAPI's 422), the list of its field errors."""

    detail: str | list[FieldError]


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
    429: "Too many runs in flight for this principal",
}


# Only where a run's events are read: they were swept (the run ended long ago).
GONE = "The run's events have expired"


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for FastAPI: each status with the `{"detail": …}` body."""
    chosen = statuses or tuple(REFUSALS)
    return {
        status: {"model": ErrorBody, "description": REFUSALS.get(status, GONE)} for status in chosen
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
