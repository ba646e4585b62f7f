"""The built-in `lead_agent`: a model that may call tools, in a loop, until it answers.

Everything that varies lives in `services/runner/agent/`: which tools a run may
use and which the model is shown (tools.py; the MCP servers' in mcp_tools.py),
the middleware chain around each model call (middleware.py), the system prompt
(prompt.py) and the workspace file tools (workspace.py). The model comes from `create_chat_model`.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.runtime import Runtime
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11

from waybill.common.model_overrides import model_overrides
from waybill.common.settings import get_settings
from waybill.services.runner.agent.mcp_tools import mcp_toolbox
from waybill.services.runner.agent.middleware import (
    ModelRequest,
    apply_after,
    apply_before,
    default_chain,
)
from waybill.services.runner.agent.tools import assemble, authorized, with_extra_tools
from waybill.services.runner.models import create_chat_model
from waybill.services.runner.run_journal import note_middleware


class LeadAgentContext(TypedDict, total=False):
    """What a run may pass in `context` (admission drops any other key)."""

    model_name: str
    # The model's reasoning effort and sampling parameters (common/model_overrides.py).
    reasoning_effort: str
    model_params: dict[str, Any]
    agent_name: str
    # Injected by admission from the authenticated caller; never the client's.
    user_id: str
    role: str
    channel: dict[str, str]
    # Request-scoped secrets, opened for the run only (see common/sealed.py).
    secrets: dict[str, str]


def _configurable(config: RunnableConfig) -> dict[str, Any]:
    return dict(config.get("configurable") or {})


async def _tool_sets(
    state: MessagesState, config: RunnableConfig, runtime: Runtime[LeadAgentContext]
) -> tuple[list[Any], list[Any]]:
    settings = get_settings()
    role = (runtime.context or {}).get("role")
    for_role = settings.role_tools().get(role) if role else None
    catalog = with_extra_tools(await mcp_toolbox(settings).tools())
    tools = authorized(_configurable(config), for_role, catalog)
    return assemble(tools, state["messages"], settings.deferred_tools_threshold)


async def call_model(
    state: MessagesState, config: RunnableConfig, runtime: Runtime[LeadAgentContext]
) -> dict[str, Any]:
    if not state["messages"]:
        raise ValueError("lead_agent needs input.messages: a list with at least one message")
    configurable = _configurable(config)
    context: dict[str, Any] = {
        **(runtime.context or {}),
        "thread_id": configurable.get("thread_id"),
    }
    shown, _ = await _tool_sets(state, config, runtime)
    request = ModelRequest(messages=list(state["messages"]), tools=shown, context=context)
    chain = default_chain(get_settings().history_limit)

    def note(name: str, decision: dict[str, Any]) -> None:
        note_middleware(config, name, decision)

    request = apply_before(chain, request, note)
    model_name = context.get("model_name") or configurable.get("model_name")
    overrides = model_overrides(context, configurable)
    model = create_chat_model(model_name, overrides=overrides).bind_tools(request.tools)
    response = await model.ainvoke(request.messages, config)
    return {"messages": [apply_after(chain, response, note)]}


async def run_tools(
    state: MessagesState, config: RunnableConfig, runtime: Runtime[LeadAgentContext]
) -> dict[str, Any]:
    """Runs the requested tools; a tool the run may not use answers with an error."""
    _, runnable = await _tool_sets(state, config, runtime)
    result: dict[str, Any] = await ToolNode(runnable).ainvoke(state, config)
    return result


def route_after_model(state: MessagesState) -> str:
    last = state["messages"][-1]
    if isinstance(last, AIMessage) and last.tool_calls:
        return "tools"
    return END


def build_lead_agent() -> Any:
    builder = StateGraph(MessagesState, context_schema=LeadAgentContext)
    builder.add_node("agent", call_model)  # type: ignore[call-overload]
    builder.add_node("tools", run_tools)  # type: ignore[call-overload]
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_after_model, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile()
