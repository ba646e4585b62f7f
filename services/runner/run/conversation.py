"""Tool calls that never got an answer, and the answer that closes them.

A conversation with such a call is refused by most providers, so the runner
closes them after a cancel and the lead agent's middleware before each model call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage


def unanswered_tool_calls(messages: Sequence[BaseMessage]) -> list[Any]:
    """Every tool call, in order, that no ToolMessage answers."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    return [
        call
        for message in messages
        if isinstance(message, AIMessage)
        for call in message.tool_calls
        if call.get("id") not in answered
    ]


def closing_answer(call: Any, text: str) -> ToolMessage:
    return ToolMessage(content=text, tool_call_id=call["id"], name=call["name"], status="error")


CANCELLED_TOOL_REPLY = "Cancelled: the run was interrupted before this tool call finished."
