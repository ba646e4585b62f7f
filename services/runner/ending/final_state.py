"""The thread's state as a run leaves it: read even when the graph cannot build it,
and with the tool calls a cut-short run left unanswered closed."""

from __future__ import annotations

import logging
from typing import Any

from langgraph.pregel import Pregel
from langgraph.types import StateSnapshot

from waybill.services.runner.persistence.fencing import RunFence, StaleEpochError
from waybill.services.runner.run.conversation import (
    CANCELLED_TOOL_REPLY,
    closing_answer,
    unanswered_tool_calls,
)
from waybill.services.runner.run.inputs import thread_config
from waybill.v1 import common_pb2

log = logging.getLogger("waybill.runner")


async def final_state(graph: Pregel, run: common_pb2.Run) -> StateSnapshot:
    """The thread's state as the run left it; an empty one when it cannot be read
    (an input the graph refused, e.g. a message of an unknown role, is stored as a
    pending write that no read can apply), so the run still ends as a graph failure."""
    config = thread_config(run.thread_id)
    try:
        return await graph.aget_state(config)
    except StaleEpochError:
        raise
    except Exception as error:
        log.info("run %s: its state cannot be read (%s)", run.run_id, error)
        return StateSnapshot({}, (), config, None, None, None, (), ())


async def answer_dangling_tool_calls(
    graph: Pregel, run: common_pb2.Run, fence: RunFence, recorded: dict[str, Any] | None = None
) -> None:
    """A cut-short tool call would poison the thread for every provider: answer it,
    with its recorded result when it finished (a cancel cut the graph after it)."""
    config = thread_config(run.thread_id)
    snapshot = await final_state(graph, run)
    values = snapshot.values if isinstance(snapshot.values, dict) else {}
    calls = unanswered_tool_calls(values.get("messages") or [])
    if not calls:
        return
    recorded = recorded or {}
    replies = [
        recorded.get(call["id"]) or closing_answer(call, CANCELLED_TOOL_REPLY) for call in calls
    ]
    fence.check("closing dangling tool calls")
    await graph.aupdate_state(config, {"messages": replies})
