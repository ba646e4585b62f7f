"""How `graph.astream` output becomes LangGraph Platform's SSE events.

Each frame is serialized to JSON bytes exactly once, here; the journal and the
gateway pass those bytes through untouched.
"""

from __future__ import annotations

import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from langchain_core.messages import BaseMessage, BaseMessageChunk
from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel

from waybill.common import codec
from waybill.services.runner.graphs.context import declared_keys, graph_context
from waybill.services.runner.reads.thread_state import _checkpoint

# What a client may ask for -> what `graph.astream` is given.
STREAM_MODES = {
    "values": "values",
    "updates": "updates",
    "messages": "messages",
    "messages-tuple": "messages",
    "custom": "custom",
    "debug": "debug",
    "tasks": "tasks",
    "checkpoints": "checkpoints",
}


def requested_names(stream_mode: Any) -> list[str]:
    return [stream_mode] if isinstance(stream_mode, str) else list(stream_mode or ["values"])


def requested_modes(stream_mode: Any) -> list[str]:
    """The astream modes for a run's `stream_mode` (a name or a list; default values).
    `events` is not an astream mode: it switches the run to `astream_events`."""
    modes: list[str] = []
    for name in requested_names(stream_mode):
        mode = STREAM_MODES.get(name)
        if mode is not None and mode not in modes:
            modes.append(mode)
    return modes


def event_name(mode: str, namespace: tuple[str, ...]) -> str:
    """`messages` keeps its name; subgraph frames are `mode|ns1|ns2`."""
    return "|".join((mode, *namespace)) if namespace else mode


class FrameEncoder:
    """Turns one run's astream chunks into named SSE events, serialized once.

    `messages-tuple` sends each token as `messages` `[chunk, metadata]`. The
    older `messages` mode sends `messages/metadata` when a message first
    appears, `messages/partial` with the message so far, and
    `messages/complete` when it is whole, as LangGraph Platform does.
    """

    def __init__(self, stream_mode: Any) -> None:
        names = requested_names(stream_mode)
        self.tuples = "messages-tuple" in names
        self.accumulated = "messages" in names
        self.events = "events" in names
        self.modes = set(requested_modes(stream_mode))
        self._so_far: dict[str, Any] = {}
        self._metadata: Any = None
        self._metadata_bytes = b"null"

    def encode_event(self, event: dict[str, Any], subgraphs: bool) -> list[tuple[str, bytes]]:
        """One `astream_events` event: sent as `events`; the root graph's stream
        chunks also feed the other requested modes."""
        frames = [("events", codec.dumps(event))]
        if event["event"] == "on_chain_stream" and not event.get("parent_ids"):
            chunk = event["data"]["chunk"]
            namespace, mode, data = chunk if subgraphs else ((), *chunk)
            if mode in self.modes:
                frames.extend(self.encode(mode, namespace, data))
        return frames

    def encode(self, mode: str, namespace: tuple[str, ...], data: Any) -> list[tuple[str, bytes]]:
        if mode == "checkpoints":
            data = public_checkpoint(data)
        elif mode == "debug" and isinstance(data, dict) and data.get("type") == "checkpoint":
            data = {**data, "payload": debug_checkpoint(data.get("payload"))}
        if mode != "messages":
            return [(event_name(mode, namespace), codec.dumps(data))]
        message, metadata = data
        frames = []
        if self.tuples:
            pair = b"[" + message_json(message) + b"," + self._metadata_json(metadata) + b"]"
            frames.append((event_name("messages", namespace), pair))
        if self.accumulated:
            frames.extend(self._accumulate(message, metadata, namespace))
        return frames

    def _metadata_json(self, metadata: Any) -> bytes:
        """Every token of one model call carries the same metadata dict: encode it once."""
        if metadata is not self._metadata:
            self._metadata, self._metadata_bytes = metadata, codec.dumps(metadata)
        return self._metadata_bytes

    def _accumulate(
        self, message: Any, metadata: Any, namespace: tuple[str, ...]
    ) -> list[tuple[str, bytes]]:
        frames = []
        message_id = getattr(message, "id", None) or ""
        if message_id not in self._so_far:
            payload = codec.dumps({message_id: {"metadata": metadata}})
            frames.append((event_name("messages/metadata", namespace), payload))
        if not isinstance(message, BaseMessageChunk):
            self._so_far[message_id] = None
            return [*frames, (event_name("messages/complete", namespace), codec.dumps([message]))]
        so_far = self._so_far.get(message_id)
        so_far = message if so_far is None else so_far + message
        self._so_far[message_id] = so_far
        frames.append((event_name("messages/partial", namespace), codec.dumps([so_far])))
        if getattr(message, "chunk_position", None) == "last":
            frames.append((event_name("messages/complete", namespace), codec.dumps([so_far])))
        return frames


# Waybill's own `configurable` entries (the run's tool-call ledger): the run's
# business, never shown in a checkpoint's config (LangGraph drops its `__pregel_`
# ones the same way).
PRIVATE_CONFIG_PREFIX = "__waybill"


def public_config(config: Any) -> Any:
    """A config without Waybill's own `configurable` entries."""
    configurable = config.get("configurable") if isinstance(config, dict) else None
    if not configurable or not any(key.startswith(PRIVATE_CONFIG_PREFIX) for key in configurable):
        return config
    kept = {k: v for k, v in configurable.items() if not k.startswith(PRIVATE_CONFIG_PREFIX)}
    return {**config, "configurable": kept}


def public_checkpoint(payload: Any) -> Any:
    """A `checkpoints` payload (LangGraph's `CheckpointPayload`) with public configs."""
    if not isinstance(payload, dict):
        return payload
    return {
        **payload,
        "config": public_config(payload.get("config")),
        "parent_config": public_config(payload.get("parent_config")),
    }


def debug_checkpoint(payload: Any) -> Any:
    """A `debug` checkpoint's payload as LangGraph Platform sends it: the
    `checkpoints` payload with `checkpoint` and `parent_checkpoint` references
    beside its configs, and a subgraph task's `state` config given as its
    `checkpoint` (the configurable)."""
    if not isinstance(payload, dict):
        return payload
    payload = public_checkpoint(payload)
    tasks = []
    for task in payload.get("tasks") or []:
        state = task.get("state") if isinstance(task, dict) else None
        if isinstance(state, dict) and state.get("configurable"):
            task = {k: v for k, v in task.items() if k != "state"}
            task["checkpoint"] = public_config(state)["configurable"]
        tasks.append(task)
    return {
        **payload,
        "checkpoint": _checkpoint(payload.get("config")),
        "parent_checkpoint": _checkpoint(payload.get("parent_config")),
        "tasks": tasks,
    }


def message_json(message: Any) -> bytes:
    """A message as JSON, as `model_dump()` gives it. A LangChain message's fields are
    plain data, so its `__dict__` is the same dict at a tenth of the cost; this runs
    for every token. Extra fields (kept apart by pydantic) take the long way."""
    if isinstance(message, BaseMessage) and not message.__pydantic_extra__:
        return codec.dumps(message.__dict__)
    return codec.dumps(message)


def metadata_event(run_id: str, attempt: int) -> tuple[str, bytes]:
    return "metadata", codec.dumps({"run_id": run_id, "attempt": attempt})


# Where Waybill's own failures come from (a peer unreachable, the database): the
# class and text of these are the server's business, never a run's stream's.
INFRASTRUCTURE_MODULES = ("waybill", "grpc", "sqlalchemy", "asyncpg", "psycopg", "redis")


class RunnerFailure(RuntimeError):
    """What a run's stream and receipt say when Waybill itself failed the run."""


class RunRefusal(RuntimeError):
    """Waybill refused to carry out a run for a reason its reader can act on (a
    state too large to journal, a runner out of node threads): shown as it is."""


def as_reported(error: BaseException) -> BaseException:
    """The error a run's stream and receipt show: a graph's own (a factory that
    raised) as it is, as LangGraph Platform shows it; Waybill's own as a plain
    `RunnerFailure`, its class, details and addresses left to the log."""
    if isinstance(error, RunRefusal):
        return error
    if type(error).__module__.split(".")[0] not in INFRASTRUCTURE_MODULES:
        return error
    return RunnerFailure(
        "The runner could not carry out this run (a Waybill service or database it "
        "needs failed); the runner's log has the details."
    )


def error_event(error: BaseException, with_traceback: bool = False) -> tuple[str, bytes]:
    """LangGraph Platform's error event; with `with_traceback` (WAYBILL_ERROR_TRACEBACKS,
    on under `waybill dev`), the project code's traceback as well. An infrastructure
    failure (a `RunnerFailure`) never carries one: its details stay in the log."""
    payload = {"error": type(error).__name__, "message": str(error)}
    payload.update(getattr(error, "stream_fields", None) or {})  # e.g. BudgetExceeded's
    if with_traceback and not isinstance(error, RunnerFailure) and error.__traceback__:
        payload["traceback"] = "".join(traceback.format_exception(error))
    return "error", codec.dumps(payload)


async def graph_frames(
    graph: Pregel,
    kwargs: dict[str, Any],
    config: RunnableConfig,
    start_input: Callable[[], Awaitable[Any]],
    secrets_key: Callable[[], bytes],
) -> AsyncIterator[list[tuple[str, bytes]]]:
    """A run's SSE events, from `astream`, or `astream_events` when `events` is asked."""
    stream_mode = kwargs.get("stream_mode")
    encoder = FrameEncoder(stream_mode)
    subgraphs = bool(kwargs.get("stream_subgraphs"))
    options: dict[str, Any] = {
        "context": graph_context(kwargs.get("context"), declared_keys(graph), secrets_key),
        "stream_mode": requested_modes(stream_mode) or ["values"],
        "subgraphs": subgraphs,
        "interrupt_before": kwargs.get("interrupt_before"),
        "interrupt_after": kwargs.get("interrupt_after"),
        "durability": kwargs.get("durability") or "async",
    }
    graph_input = await start_input()
    if encoder.events:
        events = graph.astream_events(graph_input, config, version="v2", **options)
        async for event in events:
            yield encoder.encode_event(dict(event), subgraphs)
        return
    # `values` through the output schema, as LangGraph Platform streams them.
    options["output_keys"] = graph.output_channels
    async for chunk in graph.astream(graph_input, config, **options):
        parts: tuple[Any, ...] = chunk if subgraphs else ((), *chunk)  # type: ignore[assignment]
        namespace, mode, data = parts
        yield encoder.encode(mode, namespace, data)
