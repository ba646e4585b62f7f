"""(a) The baseline: `lead_agent` streamed by `graph.astream` in this process."""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from bench.timing import RunTiming, checked_timing, token_input
from tests.support.run_scopes import tool_scope
from waybill.common.settings import Settings
from waybill.services.runner.agent.lead_agent import build_lead_agent
from waybill.services.runner.run.scope import RunLimits

# The lead agent's nodes read their run's scope (its limits, its sinks), which the
# runner installs in every run's config: the baseline installs one too, its sinks
# keeping what they are told, its tool calls all run.
WORKSPACES = Path(tempfile.mkdtemp(prefix="bench-workspaces-"))
LIMITS = RunLimits.from_settings(Settings(workspaces_dir=WORKSPACES))


def build_graph() -> Any:
    # An in-memory checkpointer, so the baseline pays for checkpointing too but no I/O.
    return build_lead_agent().copy(update={"checkpointer": InMemorySaver()})


async def time_run(graph: Any, tokens: int) -> RunTiming:
    thread_id = str(uuid.uuid4())
    scope = tool_scope(WORKSPACES, run_id=str(uuid.uuid4()), thread_id=thread_id, limits=LIMITS)
    config = scope.installed_in({"configurable": {"thread_id": thread_id}})
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
