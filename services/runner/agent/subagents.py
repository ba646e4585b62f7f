"""Subagents: the lead agent delegates work with `task`, inside the same run.

Each `task` call is sent to the lead agent's `task` node (one LangGraph task
per call, so calls of one model turn run side by side), which runs the named
subagent (YAML `subagents`: its prompt, tools and model) as a subgraph. Its
events therefore reach a client that streams with `stream_subgraphs` under the
subgraph's namespace, `task:<id>` (`updates|task:<id>`, `messages|task:<id>`...);
its model calls are counted with source `subagents`; a cancel of the run
cancels it with the rest of the graph. A run has at most
`WAYBILL_SUBAGENTS_MAX_PARALLEL` subagents working at once; the others wait
for a turn. A subagent's tools are those of its entry that the run itself
may use (the same authorization as the lead agent's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from waybill.common.config_file import SubagentSpec
from waybill.services.runner.graphs.chat_models import ModelCatalog, create_chat_model
from waybill.services.runner.run.scope import RunScope

ANSWER_RECORD_MAX = 2000


def build_subagent(
    spec: SubagentSpec, tools: Sequence[BaseTool], model_name: str | None, models: ModelCatalog
) -> Any:
    """The subagent's graph: its model, with its prompt, calling its tools until it answers."""
    model = create_chat_model(spec.model or model_name, models)
    model.metadata = {**(model.metadata or {}), "waybill_source": "subagents"}
    bound = model.bind_tools(list(tools)) if tools else model

    async def think(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        messages = [SystemMessage(spec.prompt), *state["messages"]]
        return {"messages": [await bound.ainvoke(messages, config)]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", think)  # type: ignore[call-overload]
    builder.add_edge(START, "agent")
    if tools:
        builder.add_node("tools", ToolNode(list(tools)))
        builder.add_conditional_edges("agent", tools_condition, ["tools", END])
        builder.add_edge("tools", "agent")
    else:
        builder.add_edge("agent", END)
    # No checkpoints of its own: the run's checkpoint after the task holds its answer.
    return builder.compile(checkpointer=False, name=spec.name)


def _answer(call: dict[str, Any], text: str, status: str = "success") -> dict[str, Any]:
    message = ToolMessage(text, tool_call_id=call["id"], name="task", status=status)
    return {"messages": [message]}


async def run_task(
    call: dict[str, Any],
    config: RunnableConfig,
    run_tools: Sequence[BaseTool],
    model_name: str | None,
) -> dict[str, Any]:
    """One `task` call: its subagent's final reply as the call's tool message."""
    # The subagent is a subgraph of its parent's run: the same attempt, fence and
    # tool-call record, so it works in the parent's scope (its config is the task
    # node's) and shares the parent's slots, journal, sandbox and workspace gate.
    scope = RunScope.of(config)
    args = call.get("args") or {}
    spec = scope.limits.subagent(args.get("subagent"))
    if spec is None:
        known = ", ".join(agent.name for agent in scope.limits.subagents)
        return _answer(call, f"no subagent {args.get('subagent')!r}; known: {known}", "error")
    tools = [t for t in run_tools if t.name in spec.tools]
    configurable = config.get("configurable") or {}
    seen = {
        "subagent": spec.name,
        "tool_call_id": call["id"],
        "namespace": str(configurable.get("checkpoint_ns") or ""),
    }
    limit = {"recursion_limit": 2 * spec.max_turns + 1}
    async with scope.subagent_slots:
        scope.records.emit(
            "subagent", {"action": "started", **seen, "tools": [t.name for t in tools]}
        )
        status, text = "error", ""
        try:
            graph = build_subagent(spec, tools, model_name, scope.limits.models)
            prompt = HumanMessage(str(args.get("prompt") or ""))
            result = await graph.ainvoke({"messages": [prompt]}, {**config, **limit})
            status, text = "success", _final_text(result)
        except asyncio.CancelledError:
            status = "cancelled"
            raise
        except GraphRecursionError:
            text = f"subagent {spec.name!r} did not answer within {spec.max_turns} turns"
        except Exception as error:  # the subagent's failure is the task's answer
            text = f"subagent {spec.name!r} failed: {type(error).__name__}: {error}"
        finally:
            answer = text[:ANSWER_RECORD_MAX]
            ended = {"action": "ended", **seen, "status": status, "answer": answer}
            scope.records.emit("subagent", ended)
    return _answer(call, text, "success" if status == "success" else "error")


def _final_text(result: dict[str, Any]) -> str:
    messages = result.get("messages") or []
    last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    return str(last.text) if last is not None else ""
