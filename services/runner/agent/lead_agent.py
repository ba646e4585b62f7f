"""The built-in `lead_agent`: a model that may call tools, in a loop, until it answers.

Everything that varies lives in `services/runner/agent/`: which tools a run may
use and which the model is shown (tools.py; the MCP servers' in mcp_tools.py),
the middleware chain around each model call (middleware.py), the system prompt
(prompt.py), the workspace file tools (workspace.py), the user's memory
(memory.py) and a long history's summary (summarization.py). The model comes from
`create_chat_model`.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.runtime import Runtime
from langgraph.types import Send
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11

from waybill.common.model_overrides import model_overrides
from waybill.services.runner.agent.mcp_tools import mcp_tools
from waybill.services.runner.agent.memory import prompt_section, recall
from waybill.services.runner.agent.middleware import (
    ModelRequest,
    apply_after,
    apply_before,
    default_chain,
)
from waybill.services.runner.agent.subagents import run_task
from waybill.services.runner.agent.summarization import over_budget, summarize
from waybill.services.runner.agent.tools import TASK, assemble, authorized, with_extra_tools
from waybill.services.runner.graphs.chat_models import create_chat_model
from waybill.services.runner.reporting.run_journal import note_middleware
from waybill.services.runner.run.scope import RunScope


class LeadAgentContext(TypedDict, total=False):
    """What a run may pass in `context` (admission drops any other key)."""

    model_name: str
    # The model's reasoning effort and sampling parameters (common/model_overrides.py).
    reasoning_effort: str
    model_params: dict[str, Any]
    agent_name: str
    # Request-scoped secrets, opened for the run only (see common/sealed.py).
    secrets: dict[str, str]


class LeadAgentState(MessagesState, total=False):
    """The messages, and the summary of those summarized away (summarization.py)."""

    summary: str


def caller_of(runtime: Runtime[Any]) -> dict[str, Any]:
    """Whom the run acts for, as the server says (`runtime.server_info.user`, made
    from `configurable.langgraph_auth_user`): `identity`, Waybill's `role` and a
    chat's `channel`. Never the context, which is the client's."""
    info = runtime.server_info
    user = info.user if info is not None else None
    return dict(user) if isinstance(user, dict) else {}


def _configurable(config: RunnableConfig) -> dict[str, Any]:
    return dict(config.get("configurable") or {})


async def _tool_sets(
    state: MessagesState, config: RunnableConfig, runtime: Runtime[LeadAgentContext]
) -> tuple[list[Any], list[Any]]:
    limits = RunScope.of(config).limits
    role = caller_of(runtime).get("role")
    for_role = limits.role_tools.get(role) if role else None
    catalog = with_extra_tools(await mcp_tools(), limits.sandbox_offered, limits.subagents)
    tools = authorized(_configurable(config), for_role, catalog)
    return assemble(tools, state["messages"], limits.deferred_tools_threshold)


async def call_model(
    state: LeadAgentState, config: RunnableConfig, runtime: Runtime[LeadAgentContext]
) -> dict[str, Any]:
    if not state["messages"]:
        raise ValueError("lead_agent needs input.messages: a list with at least one message")
    configurable = _configurable(config)
    limits = RunScope.of(config).limits
    context: dict[str, Any] = {
        **(runtime.context or {}),
        "thread_id": configurable.get("thread_id"),
    }
    model_name = context.get("model_name") or configurable.get("model_name")
    messages, update = await _summarized(state, config, model_name)
    context["summary"] = update.get("summary", state.get("summary", ""))
    context["memory"] = await _memory(runtime, caller_of(runtime).get("identity"), config)
    shown, _ = await _tool_sets(state, config, runtime)
    request = ModelRequest(messages=messages, tools=shown, context=context)
    chain = default_chain(limits.history_limit)

    def note(name: str, decision: dict[str, Any]) -> None:
        note_middleware(config, name, decision)

    request = apply_before(chain, request, note)
    overrides = model_overrides(context, configurable)
    model = create_chat_model(model_name, limits.models, overrides).bind_tools(request.tools)
    response = await model.ainvoke(request.messages, config)
    answer = apply_after(chain, response, note)
    return {**update, "messages": [*update.get("messages", []), answer]}


async def _summarized(
    state: LeadAgentState, config: RunnableConfig, model_name: str | None
) -> tuple[list[Any], dict[str, Any]]:
    """The messages the model is shown, and the state update that summarized the
    older ones away (empty when the history is within budget or summarization is off)."""
    limits = RunScope.of(config).limits
    section = limits.summarization
    messages, summary = list(state["messages"]), state.get("summary", "")
    if not section.enabled or not over_budget(messages, summary, section, limits.history_limit):
        return messages, {}
    model = create_chat_model(section.model or model_name, limits.models)
    done = await summarize(model, messages, summary, section.keep_messages, config)
    if done is None:
        return messages, {}
    note_middleware(
        config,
        "Summarization",
        {
            "action": "summarized_history",
            "messages_summarized": len(done.removals),
            "messages_kept": len(done.kept),
        },
    )
    return done.kept, {"summary": done.summary, "messages": done.removals}


async def _memory(
    runtime: Runtime[LeadAgentContext], user_id: str | None, config: RunnableConfig
) -> str:
    """What the system prompt says the agent remembers about the run's user."""
    section = RunScope.of(config).limits.memory
    if not section.enabled or runtime.store is None or not user_id:
        return ""
    return prompt_section(await recall(runtime.store, user_id, section.max_facts))


async def run_tools(
    state: MessagesState, config: RunnableConfig, runtime: Runtime[LeadAgentContext]
) -> dict[str, Any]:
    """Runs the requested tools; a tool the run may not use answers with an error."""
    _, runnable = await _tool_sets(state, config, runtime)
    result: dict[str, Any] = await ToolNode(runnable).ainvoke(_without_tasks(state), config)
    return result


def _without_tasks(state: MessagesState) -> MessagesState:
    """The state the tool node sees: `task` calls are the task node's."""
    last = state["messages"][-1]
    if not isinstance(last, AIMessage) or all(c["name"] != TASK for c in last.tool_calls):
        return state
    calls = [c for c in last.tool_calls if c["name"] != TASK]
    return {"messages": [*state["messages"][:-1], last.model_copy(update={"tool_calls": calls})]}


async def run_subagent(
    call: dict[str, Any], config: RunnableConfig, runtime: Runtime[LeadAgentContext]
) -> dict[str, Any]:
    """One `task` call (sent here one by one, so that they run side by side)."""
    state: MessagesState = {"messages": []}
    _, runnable = await _tool_sets(state, config, runtime)
    model_name = (runtime.context or {}).get("model_name") or _configurable(config).get(
        "model_name"
    )
    return await run_task(call, config, runnable, model_name)


def route_after_model(state: MessagesState) -> str | list[str | Send]:
    last = state["messages"][-1]
    if not isinstance(last, AIMessage) or not last.tool_calls:
        return END
    tasks = [c for c in last.tool_calls if c["name"] == TASK]
    if not tasks:
        return "tools"
    routes: list[str | Send] = [Send("task", dict(call)) for call in tasks]
    if len(tasks) < len(last.tool_calls):
        routes.append("tools")
    return routes


def build_lead_agent() -> Any:
    # The summary is the agent's own bookkeeping: its input is messages alone.
    builder = StateGraph(
        LeadAgentState, context_schema=LeadAgentContext, input_schema=MessagesState
    )
    builder.add_node("agent", call_model)  # type: ignore[arg-type,call-overload]
    builder.add_node("tools", run_tools)  # type: ignore[arg-type,call-overload]
    builder.add_node("task", run_subagent)  # type: ignore[arg-type,call-overload]
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_after_model, ["tools", "task", END])
    builder.add_edge("tools", "agent")
    builder.add_edge("task", "agent")
    return builder.compile()
