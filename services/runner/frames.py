"""How `graph.astream` output becomes LangGraph Platform's SSE events.

Each frame is serialized to JSON bytes exactly once, here; the journal and the
gateway pass those bytes through untouched.
"""

from __future__ import annotations

from typing import Any

from common import codec

# What a client may ask for -> what `graph.astream` is given.
STREAM_MODES = {
    "values": "values",
    "updates": "updates",
    "messages-tuple": "messages",
    "custom": "custom",
    "debug": "debug",
    "tasks": "tasks",
    "checkpoints": "checkpoints",
}


def requested_modes(stream_mode: Any) -> list[str]:
    """The astream modes for a run's `stream_mode` (a name or a list; default values)."""
    names = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode or ["values"])
    modes: list[str] = []
    for name in names:
        mode = STREAM_MODES[name]
        if mode not in modes:
            modes.append(mode)
    return modes


def event_name(mode: str, namespace: tuple[str, ...]) -> str:
    """`messages` keeps its name; subgraph frames are `mode|ns1|ns2`."""
    return "|".join((mode, *namespace)) if namespace else mode


def frame_bytes(mode: str, data: Any) -> bytes:
    if mode == "messages":
        message, metadata = data
        return codec.dumps([message, metadata])
    return codec.dumps(data)


def metadata_event(run_id: str, attempt: int) -> tuple[str, bytes]:
    return "metadata", codec.dumps({"run_id": run_id, "attempt": attempt})


def error_event(error: BaseException) -> tuple[str, bytes]:
    return "error", codec.dumps({"error": type(error).__name__, "message": str(error)})
