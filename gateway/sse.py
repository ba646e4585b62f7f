"""The one SSE frame every stream the gateway serves is written with."""

from __future__ import annotations


def sse_frame(event: str, data: bytes, event_id: str | int | None = None) -> bytes:
    """`event:`, `data:` (JSON without raw newlines: orjson escapes them) and, when
    given, `id:`, as LangGraph Platform sends them."""
    if event_id is None:
        return b"".join((b"event: ", event.encode(), b"\ndata: ", data, b"\n\n"))
    return b"".join(
        (b"event: ", event.encode(), b"\ndata: ", data, b"\nid: ", str(event_id).encode(), b"\n\n")
    )
