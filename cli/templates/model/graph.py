"""A tool-calling agent on a real model: OpenAI, with `OPENAI_API_KEY` from `.env`.

The model is `OPENAI_MODEL` (default gpt-4o-mini); `OPENAI_BASE_URL` points it at
any OpenAI-compatible server. The caller's `context` sets the system prompt.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from langchain_core.messages import SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.runtime import Runtime


@dataclass
class Context:
    system_prompt: str = "You are a helpful assistant. Use your tools when they help."


@tool
def count_words(text: str) -> int:
    """How many words `text` has."""
    return len(text.split())


TOOLS = [count_words]


def call_model(state: MessagesState, runtime: Runtime[Context]) -> dict:
    model = ChatOpenAI(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini")).bind_tools(TOOLS)
    prompt = [SystemMessage(runtime.context.system_prompt), *state["messages"]]
    return {"messages": [model.invoke(prompt)]}


builder = StateGraph(MessagesState, context_schema=Context)
builder.add_node("model", call_model)
builder.add_node("tools", ToolNode(TOOLS))
builder.add_edge(START, "model")
builder.add_conditional_edges("model", tools_condition)
builder.add_edge("tools", "model")
graph = builder.compile()
