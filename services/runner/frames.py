"""How `graph.astream` output becomes LangGraph Platform's SSE events.

Each frame is serialized to JSON bytes exactly once, here; the journal and the
gateway pass those bytes through untouched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from langchain_core.messages import BaseMessage, BaseMessageChunk
from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel

from waybill.common import codec
from waybill.services.runner.graph_context import declared_keys, graph_context

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


def as_reported(error: BaseException) -> BaseException:
    """The error a run's stream and receipt show: a graph's own (a factory that
    raised) as it is, as LangGraph Platform shows it; Waybill's own as a plain
    `RunnerFailure`, its class, details and addresses left to the log."""
    if type(error).__module__.split(".")[0] not in INFRASTRUCTURE_MODULES:
        return error
    return RunnerFailure(
        "The runner could not carry out this run (a Waybill service or database it "
        "needs failed); the runner's log has the details."
    )


def error_event(error: BaseException) -> tuple[str, bytes]:
    return "error", codec.dumps({"error": type(error).__name__, "message": str(error)})


async def graph_frames(
    graph: Pregel,
    kwargs: dict[str, Any],
    config: RunnableConfig,
    start_input: Callable[[], Awaitable[Any]],
) -> AsyncIterator[list[tuple[str, bytes]]]:
    """A run's SSE events, from `astream`, or `astream_events` when `events` is asked."""
    stream_mode = kwargs.get("stream_mode")
    encoder = FrameEncoder(stream_mode)
    subgraphs = bool(kwargs.get("stream_subgraphs"))
    options: dict[str, Any] = {
        "context": graph_context(kwargs.get("context"), declared_keys(graph)),
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
    async for chunk in graph.astream(graph_input, config, **options):
        parts: tuple[Any, ...] = chunk if subgraphs else ((), *chunk)  # type: ignore[assignment]
        namespace, mode, data = parts
        yield encoder.encode(mode, namespace, data)
