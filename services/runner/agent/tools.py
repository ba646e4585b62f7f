"""Tools pass three gates: available -> authorized -> assembled.

- available: every tool the runner knows (`CATALOG`, and the tools of the
  configured MCP servers: mcp_tools.py);
- authorized: those the run's assistant config allows (`configurable.allowed_tools`),
  minus those it denies (`configurable.denied_tools`), and, when the config's
  `auth.role_tools` lists the role of the run's principal, only those;
- assembled: what the model is shown. With many tools, only the core ones and
  `tool_search` are shown; the model finds the rest by searching, and a tool
  found once stays shown for the rest of the conversation.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException, tool
from langgraph.config import get_stream_writer
from langgraph.types import interrupt

from waybill.common.config_file import SubagentSpec
from waybill.services.runner.agent.sandbox_tools import SANDBOX_TOOLS
from waybill.services.runner.agent.workspace import WORKSPACE_TOOLS
from waybill.services.runner.effects.tool_calls import idempotent


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


@tool
def ask_clarification(question: str) -> str:
    """Ask the user a question and wait for the answer before going on."""
    answer = interrupt({"question": question})
    return str(answer)


TASK = "task"


def _never_called(subagent: str, prompt: str) -> str:
    # The lead agent's `task` node runs subagents (agent/subagents.py), not the tool node.
    raise ToolException("task calls are run by the lead agent's task node")


def task_tool(subagents: Sequence[SubagentSpec]) -> BaseTool:
    """`task`, its description listing the subagents the config names."""
    listing = "\n".join(f"- {agent.name}: {agent.description}" for agent in subagents)
    return StructuredTool.from_function(
        _never_called,
        name=TASK,
        description=(
            "Delegate a piece of work to a subagent; `prompt` must say everything it "
            "needs (it does not see this conversation). Answers with its final reply. "
            f"Subagents:\n{listing}"
        ),
    )


TOOL_SEARCH = "tool_search"
CORE_TOOLS = ("ask_clarification", "present_files", TOOL_SEARCH)
CATALOG: dict[str, BaseTool] = {
    t.name: t for t in [add, echo, wait, ask_clarification, *WORKSPACE_TOOLS]
}
# Safe to run again after a takeover cut them short (tool_calls.py); `edit_file` is
# not (a second edit finds its text replaced), nor is any tool not named here.
IDEMPOTENT_TOOLS = {"add", "echo", "wait", "ask_clarification"} | {
    "write_file",
    "read_file",
    "list_files",
    "present_files",
}
for _tool in [*CATALOG.values(), *SANDBOX_TOOLS]:
    # A ToolException is the tool telling the model what to fix: it becomes the
    # tool's answer (status "error"), not the end of the run.
    _tool.handle_tool_error = True
    idempotent(_tool, _tool.name in IDEMPOTENT_TOOLS)


def available(
    sandbox_offered: bool = False, subagents: Sequence[SubagentSpec] = ()
) -> dict[str, BaseTool]:
    """The catalog, with the sandbox's tools when the run's limits offer them (a
    `sandbox` section that allows them, with auth off) and `task` when the config
    names `subagents`."""
    tools = dict(CATALOG)
    if sandbox_offered:
        tools.update((t.name, t) for t in SANDBOX_TOOLS)
    if subagents:
        tools[TASK] = task_tool(subagents)
    return tools


def with_extra_tools(
    extra: Iterable[BaseTool], sandbox_offered: bool, subagents: Sequence[SubagentSpec]
) -> dict[str, BaseTool]:
    """The available tools and tools from elsewhere (MCP servers); a name already
    taken stays the first tool's."""
    catalog = available(sandbox_offered, subagents)
    for found in extra:
        catalog.setdefault(found.name, found)
    return catalog


def authorized(
    configurable: dict[str, Any],
    for_role: Iterable[str] | None = None,
    catalog: dict[str, BaseTool] | None = None,
) -> list[BaseTool]:
    """`for_role`: the tools the principal's role may use; None means no limit.
    `catalog`: the available tools (default: `available()`)."""
    catalog = available() if catalog is None else catalog
    allowed = configurable.get("allowed_tools")
    denied = set(configurable.get("denied_tools") or ())
    role_allows = None if for_role is None else set(for_role)
    names = [
        n
        for n in catalog
        if (allowed is None or n in allowed)
        and n not in denied
        and (role_allows is None or n in role_allows)
    ]
    return [catalog[n] for n in names]


def make_tool_search(deferred: Sequence[BaseTool]) -> BaseTool:
    @tool(TOOL_SEARCH)
    def tool_search(query: str) -> str:
        """Find more tools by keyword; returns the matching tools' names and descriptions."""
        words = query.lower().split()
        found = [
            {"name": t.name, "description": t.description}
            for t in deferred
            if any(w in f"{t.name} {t.description}".lower() for w in words)
        ]
        return json.dumps(found)

    return idempotent(tool_search)


def discovered(messages: Iterable[BaseMessage]) -> set[str]:
    """Tool names that earlier `tool_search` calls revealed in this conversation."""
    names: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage) and message.name == TOOL_SEARCH:
            try:
                names.update(item["name"] for item in json.loads(str(message.content)))
            except (ValueError, TypeError, KeyError):
                continue
    return names


def assemble(
    tools: list[BaseTool], messages: Sequence[BaseMessage], threshold: int
) -> tuple[list[BaseTool], list[BaseTool]]:
    """(tools shown to the model, tools the tool node can run)."""
    if len(tools) <= threshold:
        return tools, tools
    deferred = [t for t in tools if t.name not in CORE_TOOLS]
    search = make_tool_search(deferred)
    seen = discovered(messages)
    shown = [t for t in tools if t.name in CORE_TOOLS or t.name in seen]
    return [*shown, search], [*tools, search]
