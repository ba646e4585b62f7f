"""The built-in `lead_agent`: a model that may call tools, in a loop, until it answers."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.runtime import Runtime
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11

from services.runner.models import create_chat_model


class LeadAgentContext(TypedDict, total=False):
    model_name: str


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    # Progress reaches clients of the `custom` stream mode.
    get_stream_writer()({"tool": "add", "progress": "adding"})
    return a + b


@tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@tool
async def wait(seconds: float) -> str:
    """Wait for a number of seconds (stands in for a slow tool in demos and tests)."""
    await asyncio.sleep(seconds)
    return f"waited {seconds:g} s"


TOOLS = [add, echo, wait]


async def call_model(
    state: MessagesState, config: RunnableConfig, runtime: Runtime[LeadAgentContext]
) -> dict[str, Any]:
    if not state["messages"]:
        raise ValueError("lead_agent needs input.messages: a list with at least one message")
    context = runtime.context or {}
    configurable = config.get("configurable") or {}
    model_name = context.get("model_name") or configurable.get("model_name")
    model = create_chat_model(model_name).bind_tools(TOOLS)
    response = await model.ainvoke(state["messages"], config)
    return {"messages": [response]}


def route_after_model(state: MessagesState) -> str:
    last = state["messages"][-1]
    if isinstance(last, AIMessage) and last.tool_calls:
        return "tools"
    return END


def build_lead_agent() -> Any:
    builder = StateGraph(MessagesState, context_schema=LeadAgentContext)
    builder.add_node("agent", call_model)  # type: ignore[call-overload]
    builder.add_node("tools", ToolNode(TOOLS))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_after_model, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile()
