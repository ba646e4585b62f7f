"""The v3 thread streaming protocol's events, made from Waybill's journal events.

`langgraph-sdk`'s `threads.stream(...)` reads a thread's runs as protocol events:
`{"type": "event", "event_id", "seq", "method", "params": {"namespace",
"timestamp", "data", "node"?}}`. This module turns one run's journal events
(LangGraph Platform's SSE events: `values`, `updates`, `messages` tuples,
`custom`, `tasks`, `checkpoints`, `error`, subgraphs' `mode|ns`) into them, as
LangGraph Platform's event-streaming session does:

- `lifecycle` `running` when the run starts, and one terminal event when it ends
  (`completed`, `failed` with the error, `interrupted`);
- `__interrupt__` (in `values` or `updates`) becomes `input.requested`
  `{interrupt_id, payload}` and the root `lifecycle` `interrupted`;
- each message's token tuples become `message-start`, a text content block
  (`content-block-start`, `-delta`…, `-finish`) and `message-finish`;
- a step's messages give the `tools` channel: its AI tool calls `tool-started`,
  its tool messages `tool-finished` (or `tool-error`).

`seq` numbers every event of the thread, in order, before any filter: a client
that comes back with `since` gets the same numbers again, so only what it missed.
`event_id` is stable across connections (the run and the journal event it came
from), which the SDK uses to drop events it has seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from waybill.common import codec

# The channels a client may subscribe to (as LangGraph Platform accepts them).
CHANNELS = frozenset(
    {"values", "updates", "checkpoints", "messages", "tools"}
    | {"custom", "lifecycle", "input", "tasks"}
)
# What a protocol run streams: every mode a channel is made from.
RUN_STREAM_MODES = ["values", "updates", "messages-tuple", "custom", "tasks", "checkpoints"]

ROLES = {"ai": "ai", "human": "human", "system": "system", "tool": "tool"}
RUN_STATUS_LIFECYCLE = {"success": "completed", "error": "failed", "interrupted": "interrupted"}


def is_channel(name: Any) -> bool:
    """A known channel, or `custom:<name>`."""
    if not isinstance(name, str):
        return False
    return name in CHANNELS or (name.startswith("custom:") and len(name) > len("custom:"))


@dataclass(frozen=True)
class EventFilter:
    """One connection's filter: channels, namespace prefixes within a depth."""

    channels: frozenset[str]
    namespaces: tuple[tuple[str, ...], ...] | None = None
    depth: int | None = None

    def passes(self, event: dict[str, Any]) -> bool:
        params = event["params"]
        return self._channel_passes(event["method"], params["data"]) and self._namespace_passes(
            params["namespace"]
        )

    def _channel_passes(self, method: str, data: Any) -> bool:
        channel = "input" if method == "input.requested" else method
        if channel in self.channels:
            return True
        name = data.get("name") if channel == "custom" and isinstance(data, dict) else None
        return bool(name) and f"custom:{name}" in self.channels

    def _namespace_passes(self, namespace: list[str]) -> bool:
        if not self.namespaces:
            return True
        for prefix in self.namespaces:
            if not prefix_matches(namespace, prefix):
                continue
            if self.depth is None or len(namespace) - len(prefix) <= self.depth:
                return True
        return False


def prefix_matches(namespace: list[str], prefix: tuple[str, ...]) -> bool:
    """A prefix segment without `:` also matches a segment's name before its task id."""
    if len(prefix) > len(namespace):
        return False
    for wanted, segment in zip(prefix, namespace, strict=False):
        if segment != wanted and (":" in wanted or segment.split(":")[0] != wanted):
            return False
    return True


@dataclass
class Numbering:
    """The thread's event counter, shared by the runs one connection reads."""

    seq: int = 0

    def next(self) -> int:
        self.seq += 1
        return self.seq


@dataclass
class OpenMessage:
    """A message whose tokens are still coming."""

    namespace: list[str]
    text: str = ""
    started_block: bool = False


@dataclass
class RunEvents:
    """One run's protocol events, made as its journal events come."""

    run_id: str
    graph_name: str
    numbering: Numbering
    open_messages: dict[str, OpenMessage] = field(default_factory=dict)
    interrupts: set[str] = field(default_factory=set)
    ended: bool = False

    # ---- the envelope --------------------------------------------------------------

    def event(
        self,
        method: str,
        namespace: list[str],
        data: Any,
        event_id: str,
        node: str | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {
            "namespace": namespace,
            "timestamp": int(time.time() * 1000),
            "data": data,
        }
        if node is not None:
            params["node"] = node
        return {
            "type": "event",
            "event_id": event_id,
            "seq": self.numbering.next(),
            "method": method,
            "params": params,
        }

    def lifecycle(self, status: str, error: str | None = None) -> dict[str, Any]:
        data: dict[str, Any] = {"event": status, "graph_name": self.graph_name}
        if error is not None:
            data["error"] = error
        return self.event("lifecycle", [], data, f"synth:{self.run_id}:lc||{status}")

    # ---- a run's start and end ------------------------------------------------------

    def started(self) -> list[dict[str, Any]]:
        return [self.lifecycle("running")]

    def finished(self, run_status: str | None) -> list[dict[str, Any]]:
        """The run's end, once its log ended: open messages closed, then its status
        (`interrupted` was sent already if an interrupt paused it; a run deleted
        since, as a rollback deletes it, has none to tell)."""
        events = self._close_messages(f"synth:{self.run_id}:end")
        if self.ended or run_status is None:
            return events
        self.ended = True
        status = RUN_STATUS_LIFECYCLE.get(run_status, "completed")
        return [*events, self.lifecycle(status)]

    # ---- one journal event -----------------------------------------------------------

    def translate(self, name: str, seq: int, data: bytes) -> list[dict[str, Any]]:
        method, _, rest = name.partition("|")
        namespace = rest.split("|") if rest else []
        event_id = f"{self.run_id}:{seq}"
        if method == "metadata":
            return []
        if method == "error":
            return self._failed(codec.loads(data, {}), event_id)
        payload = codec.loads(data)
        translate = TRANSLATIONS.get(method)
        if translate is None:
            return []
        return translate(self, namespace, payload, event_id)

    def _failed(self, error: Any, event_id: str) -> list[dict[str, Any]]:
        message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
        events = self._close_messages(event_id)
        if self.ended:
            return events
        self.ended = True
        return [*events, self.lifecycle("failed", message)]

    def _values(self, namespace: list[str], payload: Any, event_id: str) -> list[dict[str, Any]]:
        requests, values = without_interrupts(payload)
        events = self._close_messages(f"{event_id}.m", namespace)
        events += self._input_requested(namespace, requests, event_id)
        if not isinstance(values, dict) or values:
            events.append(self.event("values", namespace, values, event_id))
        return events

    def _updates(self, namespace: list[str], payload: Any, event_id: str) -> list[dict[str, Any]]:
        events = self._close_messages(f"{event_id}.m", namespace)
        if isinstance(payload, dict) and "__interrupt__" in payload:
            requests, _ = without_interrupts(payload)
            return events + self._input_requested(namespace, requests, event_id)
        node, values = node_and_values(payload)
        events.append(self.event("updates", namespace, values, event_id, node=node))
        ids = EventIds(event_id)
        ids.next()  # the update's own
        for data in tool_events(values):
            events.append(self.event("tools", namespace, data, ids.next(), node=node))
        return events

    def _custom(self, namespace: list[str], payload: Any, event_id: str) -> list[dict[str, Any]]:
        return [self.event("custom", namespace, {"payload": payload}, event_id)]

    # ---- interrupts ------------------------------------------------------------------

    def _input_requested(
        self, namespace: list[str], requests: list[dict[str, Any]], event_id: str
    ) -> list[dict[str, Any]]:
        """One `input.requested` per interrupt not told yet; then the run is paused."""
        events = []
        for request in requests:
            if request["interrupt_id"] in self.interrupts:
                continue
            self.interrupts.add(request["interrupt_id"])
            key = "\0".join(namespace)  # the reference's namespace key
            synth = f"synth:{self.run_id}:input|{key}|{request['interrupt_id']}"
            events.append(self.event("input.requested", namespace, request, synth))
        if events and not self.ended:
            self.ended = True
            events.append(self.lifecycle("interrupted"))
        return events

    # ---- messages --------------------------------------------------------------------

    def _messages(self, namespace: list[str], payload: Any, event_id: str) -> list[dict[str, Any]]:
        """A `[message chunk, metadata]` tuple: the message's next events."""
        if not (isinstance(payload, list) and len(payload) == 2 and isinstance(payload[0], dict)):
            return []
        message, metadata = payload
        message_id = str(message.get("id") or event_id)
        ids = EventIds(event_id)
        events = []
        if message_id not in self.open_messages:
            self.open_messages[message_id] = OpenMessage(namespace)
            start = message_start(message, message_id, metadata)
            events.append(self.event("messages", namespace, start, ids.next()))
        events += self._text(namespace, message_id, text_of(message.get("content")), ids)
        if is_last_chunk(message):
            events += self._finish_message(message_id, ids)
        return events

    def _text(
        self, namespace: list[str], message_id: str, text: str, ids: EventIds
    ) -> list[dict[str, Any]]:
        if not text:
            return []
        open_message = self.open_messages[message_id]
        events = []
        if not open_message.started_block:
            open_message.started_block = True
            block = {"event": "content-block-start", "index": 0, "content": text_block("")}
            events.append(self.event("messages", namespace, block, ids.next()))
        open_message.text += text
        delta = {"event": "content-block-delta", "index": 0, "delta": text_delta(text)}
        events.append(self.event("messages", namespace, delta, ids.next()))
        return events

    def _finish_message(self, message_id: str, ids: EventIds) -> list[dict[str, Any]]:
        open_message = self.open_messages.pop(message_id)
        namespace = open_message.namespace
        events = []
        if open_message.started_block:
            block = {"event": "content-block-finish", "index": 0}
            block["content"] = text_block(open_message.text)
            events.append(self.event("messages", namespace, block, ids.next()))
        events.append(self.event("messages", namespace, {"event": "message-finish"}, ids.next()))
        return events

    def _close_messages(self, event_id: str, namespace: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Messages whose model call ended without a last chunk end with their
        node's step (the next `values`/`updates` of their graph or a parent's), or
        with the run."""
        ids = EventIds(event_id)
        events: list[dict[str, Any]] = []
        for message_id, message in list(self.open_messages.items()):
            if message.namespace[: len(namespace)] == list(namespace):
                events += self._finish_message(message_id, ids)
        return events


def forwarded(method: str) -> Callable[..., list[dict[str, Any]]]:
    """Channels whose payload goes out as the graph streamed it."""

    def forward(
        run: RunEvents, namespace: list[str], payload: Any, event_id: str
    ) -> list[dict[str, Any]]:
        return [run.event(method, namespace, payload, event_id)]

    return forward


TRANSLATIONS: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "values": RunEvents._values,
    "updates": RunEvents._updates,
    "messages": RunEvents._messages,
    "custom": RunEvents._custom,
    "tasks": forwarded("tasks"),
    "checkpoints": forwarded("checkpoints"),
}


class EventIds:
    """Stable ids for the events one journal event becomes: the first keeps the
    journal event's own id, the next ones add `.1`, `.2`…"""

    def __init__(self, event_id: str) -> None:
        self.event_id = event_id
        self.count = 0

    def next(self) -> str:
        self.count += 1
        return self.event_id if self.count == 1 else f"{self.event_id}.{self.count - 1}"


# ---- payload helpers -------------------------------------------------------------------


def without_interrupts(value: Any) -> tuple[list[dict[str, Any]], Any]:
    """(the interrupts as `input.requested` data, the values without `__interrupt__`)."""
    if not isinstance(value, dict) or "__interrupt__" not in value:
        return [], value
    entries = value["__interrupt__"] if isinstance(value["__interrupt__"], list) else []
    requests = [
        {"interrupt_id": entry["id"], "payload": entry.get("value")}
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("id"), str)
    ]
    return requests, {key: item for key, item in value.items() if key != "__interrupt__"}


def node_and_values(payload: Any) -> tuple[str | None, dict[str, Any]]:
    """An `updates` payload `{node: values}` as (node, values)."""
    if isinstance(payload, dict) and len(payload) == 1:
        node, values = next(iter(payload.items()))
        return node, values if isinstance(values, dict) else {"value": values}
    return None, payload if isinstance(payload, dict) else {"value": payload}


def tool_events(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The `tools` channel, from a step's messages (Waybill's runs do not stream tool
    execution itself): an AI message's tool calls start, each tool message finishes
    its call (`tool-error` when its status says so)."""
    messages = values.get("messages")
    events: list[dict[str, Any]] = []
    for message in messages if isinstance(messages, list) else [messages]:
        if not isinstance(message, dict):
            continue
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                events.append(tool_started(call))
        if message.get("type") == "tool" and isinstance(message.get("tool_call_id"), str):
            events.append(tool_ended(message))
    return events


def tool_started(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "event": "tool-started",
        "tool_call_id": call["id"],
        "tool_name": str(call.get("name") or ""),
        "input": call.get("args"),
    }


def tool_ended(message: dict[str, Any]) -> dict[str, Any]:
    if message.get("status") == "error":
        message_text = text_of(message.get("content")) or "Tool call errored"
        return {
            "event": "tool-error",
            "tool_call_id": message["tool_call_id"],
            "message": message_text,
        }
    return {"event": "tool-finished", "tool_call_id": message["tool_call_id"], "output": message}


def message_start(message: dict[str, Any], message_id: str, metadata: Any) -> dict[str, Any]:
    kind = str(message.get("type") or "ai").removesuffix("MessageChunk").lower()
    start: dict[str, Any] = {"event": "message-start", "role": ROLES.get(kind, "ai")}
    start["id"] = message_id
    node = metadata.get("langgraph_node") if isinstance(metadata, dict) else None
    if isinstance(node, str):
        start["metadata"] = {"langgraph_node": node}
    if isinstance(message.get("tool_call_id"), str):
        start["tool_call_id"] = message["tool_call_id"]
    return start


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: Iterable[Any] = content if isinstance(content, list) else ()
    return "".join(
        part if isinstance(part, str) else str(part.get("text") or "")
        for part in parts
        if isinstance(part, str) or (isinstance(part, dict) and part.get("type") == "text")
    )


def is_last_chunk(message: dict[str, Any]) -> bool:
    """A whole message (not a chunk), or a model call's last chunk."""
    kind = str(message.get("type") or "")
    return not kind.endswith("MessageChunk") or message.get("chunk_position") == "last"


def text_block(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def text_delta(text: str) -> dict[str, str]:
    return {"type": "text-delta", "text": text}
