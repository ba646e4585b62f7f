"""The API envelope the gateway validates, its shared checks (NUL characters,
config, checkpoints, commands), and the request bodies of threads, the store,
memory and assistants. A graph's `input` is the graph's business. The bodies that
start runs are in run_schemas.py; what the gateway answers, in response_schemas.py."""

from __future__ import annotations

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

from waybill.common.statuses import ThreadStatus
from waybill.gateway.thread_select import MAX_EXTRACT_PATHS, ThreadField

# Counts and positions travel as protobuf int32.
INT32_MAX = 2**31 - 1
Offset = Annotated[int, Field(ge=0, le=INT32_MAX)]


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
    `ttl` minutes after its last refresh (see services/admission/threads/thread_ttl.py).
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
