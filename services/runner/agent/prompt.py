"""The lead agent's system prompt, from a template."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from string import Template
from typing import Any

from langchain_core.tools import BaseTool

SYSTEM_PROMPT = Template(
    """You are $agent_name, an agent that completes work orders.
Today is $today (UTC). You are working on thread $thread_id.
Files you make live in the thread's workspace; declare deliverables with present_files.
If the request is ambiguous, ask with ask_clarification instead of guessing.
Tools you can use now: $tools."""
)


def render_system_prompt(context: dict[str, Any], tools: Sequence[BaseTool]) -> str:
    prompt = SYSTEM_PROMPT.substitute(
        agent_name=context.get("agent_name") or "Waybill",
        today=datetime.now(UTC).date().isoformat(),
        thread_id=context.get("thread_id") or "(none)",
        tools=", ".join(t.name for t in tools) or "none",
    )
    # What the agent remembers of the user (memory.py), and of this conversation's
    # older part (summarization.py).
    if context.get("memory"):
        prompt += "\n\n" + str(context["memory"])
    if context.get("summary"):
        prompt += "\n\nSummary of the conversation before the messages below:\n"
        prompt += str(context["summary"])
    return prompt
