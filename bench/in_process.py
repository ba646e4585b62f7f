"""(a) The baseline: `lead_agent` streamed by `graph.astream` in this process."""

from __future__ import annotations

import time
import uuid
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from bench.timing import RunTiming, checked_timing, token_input
from waybill.services.runner.lead_agent import build_lead_agent


def build_graph() -> Any:
    # An in-memory checkpointer, so the baseline pays for checkpointing too but no I/O.
    return build_lead_agent().copy(update={"checkpointer": InMemorySaver()})


async def time_run(graph: Any, tokens: int) -> RunTiming:
    config = {"configurable": {"thread_id": str(uuid.uuid4())}}
    events = 0
    first_token_at: float | None = None
    last_event_at: float | None = None
    started = time.perf_counter()
    async for _mode, (chunk, _metadata) in graph.astream(
        token_input(tokens), config, stream_mode=["messages"]
    ):
        events += 1
        last_event_at = time.perf_counter()
        if first_token_at is None and chunk.content:
            first_token_at = last_event_at
    closed = time.perf_counter()
    return checked_timing(
        tokens,
        events,
        closed - started,
        None if first_token_at is None else first_token_at - started,
        None if last_event_at is None else last_event_at - started,
    )
