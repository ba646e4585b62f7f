"""A `create_agent` graph whose tools count their effects, for the tool-call record's
tests (and the soak): every execution appends a line to `effects.log` in
`WAYBILL_TEST_EFFECTS_DIR`; the `slow_*` tools then block until a file named
`release` appears there, so that a test can kill the runner mid-tool.

The model is planned by the input: a user message `{"calls": [{"name", "args"}]}`
makes it call those tools at once (fresh ids, as a real model's); after the tools it
answers with their results. `graph` runs them in a `ToolNode` node (all the calls of
a step in one task, the classic `tools_condition` loop); `agent` is `create_agent`'s
(one task per call); `model_graph` calls a counted model and its tools in one node."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


def _effects_dir() -> Path:
    return Path(os.environ.get("WAYBILL_TEST_EFFECTS_DIR") or ".")


def _effect(line: str) -> None:
    with (_effects_dir() / "effects.log").open("a") as log:
        log.write(line + "\n")


async def _until_released() -> None:
    # A file, not an Event: the test is another process.
    while not (_effects_dir() / "release").exists():  # noqa: ASYNC110
        await asyncio.sleep(0.02)


@tool
async def charge(key: str) -> str:
    """Charge a card (an effect that must happen once)."""
    _effect(f"charge {key}")
    return f"charged {key}"


@tool
async def slow_charge(key: str) -> str:
    """Charge a card, slowly: blocks until released."""
    _effect(f"slow_charge {key}")
    await _until_released()
    return f"slowly charged {key}"


@tool
async def slow_lookup(key: str) -> str:
    """Look something up (safe to repeat), slowly: blocks until released."""
    _effect(f"slow_lookup {key}")
    await _until_released()
    return f"looked up {key}"


slow_lookup.metadata = {"idempotent": True}  # LangChain's own field: no Waybill import


class PlannedModel(BaseChatModel):
    @property
    def _llm_type(self) -> str:
        return "planned"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        last = messages[-1]
        if isinstance(last, HumanMessage):
            plan = json.loads(str(last.content))
            calls = [
                {"name": c["name"], "args": c["args"], "id": f"call_{uuid.uuid4().hex[:12]}"}
                for c in plan["calls"]
            ]
            message = AIMessage(content="", tool_calls=calls)
        else:
            answers = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
            message = AIMessage(content="done: " + " | ".join(answers))
        return ChatResult(generations=[ChatGeneration(message=message)])


TOOLS = [charge, slow_charge, slow_lookup]


async def call_model(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await PlannedModel().ainvoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("model", call_model)
builder.add_node("tools", ToolNode(TOOLS))
builder.add_edge(START, "model")
builder.add_conditional_edges("model", tools_condition)
builder.add_edge("tools", "model")
graph = builder.compile()

agent = create_agent(PlannedModel(), tools=TOOLS)


class CountedModel(PlannedModel):
    """Each call to the provider is an effect too (tokens paid)."""

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        _effect("model")
        return super()._generate(messages, *args, **kwargs)


async def think_then_act(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
    """A model call and its tool calls in one node: killed in a tool, the node (and so
    the model call) runs again on a takeover."""
    answer = await CountedModel().ainvoke(state["messages"], config)
    results = await ToolNode(TOOLS).ainvoke({"messages": [answer]}, config)
    return {"messages": [answer, *results["messages"]]}


thinker = StateGraph(MessagesState)
thinker.add_node("think", think_then_act)
thinker.add_edge(START, "think")
model_graph = thinker.compile()
