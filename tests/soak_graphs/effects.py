"""The soak's tool-calling graph: a model node that calls the `count_effect` tool
`calls` times, one call per turn, through LangGraph's `ToolNode`. Each execution
of the tool inserts a row into `soak_tool_effects` (the soak's database,
`WAYBILL_SOAK_EFFECTS_DSN`), so the soak counts how often each call's effect
happened, across runners SIGKILLed in the middle of it.

The "model" is deterministic: the call ids are `call-<n>`, the same on every
attempt of the run, so that a call is one key however often its turn is re-run."""

from __future__ import annotations

import os
import time
from typing import Annotated, Any, TypedDict

import psycopg
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

TABLE = """CREATE TABLE IF NOT EXISTS soak_tool_effects (
    run_id text NOT NULL, call_id text NOT NULL, at timestamptz NOT NULL DEFAULT now())"""


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    calls: int
    seconds: float


@tool
def count_effect(
    seconds: float, config: RunnableConfig, tool_call_id: Annotated[str, InjectedToolCallId]
) -> str:
    """Do one countable effect, taking `seconds` around it."""
    time.sleep(seconds / 2)
    run_id = str(config["configurable"]["run_id"])
    with psycopg.connect(os.environ["WAYBILL_SOAK_EFFECTS_DSN"], autocommit=True) as conn:
        conn.execute(TABLE)
        conn.execute(
            "INSERT INTO soak_tool_effects (run_id, call_id) VALUES (%s, %s)",
            (run_id, tool_call_id),
        )
    time.sleep(seconds / 2)  # the effect happened; its result is not recorded yet
    return f"effect of {tool_call_id} done"


def model(state: State) -> dict[str, Any]:
    answered = sum(isinstance(m, ToolMessage) for m in state.get("messages", []))
    if answered >= state.get("calls", 1):
        return {"messages": [AIMessage(content=f"{answered} tool results", id=f"final-{answered}")]}
    call = {
        "name": "count_effect",
        "args": {"seconds": state.get("seconds", 1.0)},
        "id": f"call-{answered}",
    }
    return {"messages": [AIMessage(content="", tool_calls=[call], id=f"turn-{answered}")]}


builder = StateGraph(State)
builder.add_node("model", model)
builder.add_node("tools", ToolNode([count_effect]))
builder.add_edge(START, "model")
builder.add_conditional_edges("model", tools_condition)
builder.add_edge("tools", "model")
graph = builder.compile()
