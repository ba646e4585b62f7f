"""The middleware chain around every model call, in one ordered list.

Each middleware may change the request before the model sees it, and the
response after. Clarification comes last so that it sees the final answer.
When one changes something worth knowing (history trimmed, tool calls
answered or held back), its `decision_*` says what, for the run journal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool

from waybill.services.runner.agent.prompt import render_system_prompt
from waybill.services.runner.run.conversation import closing_answer, unanswered_tool_calls


@dataclass(frozen=True)
class ModelRequest:
    messages: list[BaseMessage]
    tools: list[BaseTool]
    context: dict[str, Any] = field(default_factory=dict)


class Middleware(Protocol):
    def before(self, request: ModelRequest) -> ModelRequest: ...

    def after(self, response: AIMessage) -> AIMessage: ...

    def decision_before(self, old: ModelRequest, new: ModelRequest) -> dict[str, Any] | None: ...

    def decision_after(self, old: AIMessage, new: AIMessage) -> dict[str, Any] | None: ...


# Told each decision: (middleware name, what it decided).
DecisionNote = Callable[[str, dict[str, Any]], None]


class PassThrough:
    def before(self, request: ModelRequest) -> ModelRequest:
        return request

    def after(self, response: AIMessage) -> AIMessage:
        return response

    def decision_before(self, old: ModelRequest, new: ModelRequest) -> dict[str, Any] | None:
        """What `before` changed, worth a journal record (None: nothing to note)."""
        return None

    def decision_after(self, old: AIMessage, new: AIMessage) -> dict[str, Any] | None:
        """What `after` changed, worth a journal record (None: nothing to note)."""
        return None


class SystemPrompt(PassThrough):
    """Puts the rendered system prompt first."""

    def before(self, request: ModelRequest) -> ModelRequest:
        prompt = SystemMessage(render_system_prompt(request.context, request.tools))
        rest = [m for m in request.messages if not isinstance(m, SystemMessage)]
        return replace(request, messages=[prompt, *rest])


class AnswerDanglingToolCalls(PassThrough):
    """A tool call left without an answer (a crash, an old cancel) would make
    most providers refuse the conversation: answer it before the model sees it."""

    def before(self, request: ModelRequest) -> ModelRequest:
        unanswered = {call["id"]: call for call in unanswered_tool_calls(request.messages)}
        if not unanswered:
            return request
        repaired: list[BaseMessage] = []
        for message in request.messages:
            repaired.append(message)
            if isinstance(message, AIMessage):
                repaired.extend(
                    closing_answer(unanswered[call["id"]], "This tool call did not complete.")
                    for call in message.tool_calls
                    if call.get("id") in unanswered
                )
        return replace(request, messages=repaired)

    def decision_before(self, old: ModelRequest, new: ModelRequest) -> dict[str, Any]:
        answered = [call["id"] for call in unanswered_tool_calls(old.messages)]
        return {"action": "answered_dangling_tool_calls", "tool_call_ids": answered}


class TrimHistory(PassThrough):
    """Keeps the model's input bounded: the last `keep` messages (whole tool turns)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep

    def before(self, request: ModelRequest) -> ModelRequest:
        if len(request.messages) <= self.keep:
            return request
        kept = request.messages[-self.keep :]
        while kept and isinstance(kept[0], ToolMessage):  # never start mid tool turn
            kept = kept[1:]
        head = [m for m in request.messages[:1] if isinstance(m, SystemMessage)]
        return replace(request, messages=[*head, *kept])

    def decision_before(self, old: ModelRequest, new: ModelRequest) -> dict[str, Any] | None:
        if len(new.messages) >= len(old.messages):
            return None  # over the limit only by the system prompt it keeps
        return {
            "action": "trimmed_history",
            "keep": self.keep,
            "messages_before": len(old.messages),
            "messages_after": len(new.messages),
        }


class Clarification(PassThrough):
    """A question to the user is asked alone: other tool calls beside it wait."""

    def after(self, response: AIMessage) -> AIMessage:
        asks = [c for c in response.tool_calls if c["name"] == "ask_clarification"]
        if asks and len(response.tool_calls) > 1:
            return response.model_copy(update={"tool_calls": asks[:1]})
        return response

    def decision_after(self, old: AIMessage, new: AIMessage) -> dict[str, Any]:
        kept = {call["id"] for call in new.tool_calls}
        held = [call["name"] for call in old.tool_calls if call["id"] not in kept]
        return {"action": "clarification_alone", "held_back_tool_calls": held}


def default_chain(history_limit: int) -> list[Middleware]:
    """The order matters: prompt, repair, trim, ... clarification last."""
    return [SystemPrompt(), AnswerDanglingToolCalls(), TrimHistory(history_limit), Clarification()]


def apply_before(
    chain: list[Middleware], request: ModelRequest, note: DecisionNote
) -> ModelRequest:
    """The request through every middleware in order; each change is noted."""
    for middleware in chain:
        changed = middleware.before(request)
        if changed is not request:
            decision = middleware.decision_before(request, changed)
            if decision:
                note(type(middleware).__name__, decision)
        request = changed
    return request


def apply_after(chain: list[Middleware], response: AIMessage, note: DecisionNote) -> AIMessage:
    """The response through every middleware in reverse order; each change is noted."""
    for middleware in reversed(chain):
        changed = middleware.after(response)
        if changed is not response:
            decision = middleware.decision_after(response, changed)
            if decision:
                note(type(middleware).__name__, decision)
        response = changed
    return response
