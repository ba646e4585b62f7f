"""What delivery needs from a run to verify it: whether its agent had workspace
tools, and which files its `present_files` calls presented.

Presented files come from the tool calls the run's model made (never from its
text). A run's messages are those its checkpoints added: the history is walked
back to the last checkpoint of another run, so a run taken over by another
runner still counts what its earlier epochs presented.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langgraph.prebuilt import ToolNode
from langgraph.pregel import Pregel

from waybill.services.runner.agent.tools import authorized
from waybill.services.runner.agent.workspace import WORKSPACE_TOOLS

WORKSPACE_TOOL_NAMES = frozenset(t.name for t in WORKSPACE_TOOLS)
PRESENT_FILES = "present_files"
LEAD_AGENT = "lead_agent"


def has_workspace_tools(
    graph_id: str,
    graph: Pregel,
    configurable: dict[str, Any],
    role_tools: Iterable[str] | None,
) -> bool:
    """The lead agent: when the run may use a workspace tool. Any other graph:
    when one of its tool nodes holds a workspace tool."""
    if graph_id == LEAD_AGENT:
        names = {t.name for t in authorized(configurable, role_tools)}
        return bool(names & WORKSPACE_TOOL_NAMES)
    for node in graph.nodes.values():
        bound = getattr(node, "bound", None)
        if isinstance(bound, ToolNode) and set(bound.tools_by_name) & WORKSPACE_TOOL_NAMES:
            return True
    return False


def verifies_workspace(
    graph_id: str, graph: Pregel, config: Any, role_tools: Mapping[str, list[str]]
) -> bool:
    """Whether the run may use workspace tools (its caller's role's, when the
    server named one: `role_tools`, the config's `auth.role_tools`), so its
    delivery is verified."""
    configurable = dict(config.get("configurable") or {})
    caller = configurable.get("langgraph_auth_user")
    role = caller.get("role") if isinstance(caller, dict) else None
    for_role = role_tools.get(role) if role else None
    return has_workspace_tools(graph_id, graph, configurable, for_role)


def _messages(values: Any) -> list[BaseMessage]:
    if not isinstance(values, dict):
        return []
    messages = values.get("messages") or []
    return [m for m in messages if isinstance(m, BaseMessage)]


def added_messages(started_from: Any, final: Any) -> list[BaseMessage]:
    """The messages a run added to the thread: its final values' messages, less
    those of the values it started from."""
    known = {m.id for m in _messages(started_from) if m.id}
    return [m for m in _messages(final) if not m.id or m.id not in known]


def presented_paths(messages: Iterable[BaseMessage]) -> list[str]:
    """Every path a present_files call named: a call the tool refused (a file that
    does not exist) still counts, as the agent claimed it as a deliverable."""
    paths: list[str] = []
    for message in messages:
        if not isinstance(message, AIMessage):
            continue
        for call in message.tool_calls:
            if call.get("name") != PRESENT_FILES:
                continue
            named = (call.get("args") or {}).get("paths") or []
            paths.extend(str(p) for p in named if isinstance(p, str))
    return list(dict.fromkeys(paths))
