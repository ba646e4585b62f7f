"""A history over the model's budget is summarized, not trimmed.

Before a model call of the lead agent, when the thread's messages are estimated
above `summarization.trigger_tokens` (or longer than WAYBILL_HISTORY_LIMIT), the
older ones are summarized by the model (together with the summary of earlier
summarizations) and removed from the state; at most the newest `keep_messages` stay,
from a user's message where they hold one, never from inside a tool turn. The
summary is kept in the state (`summary`) and shown in the system prompt; the
originals stay in the thread's checkpoint history, since each checkpoint keeps the
messages it had. (As langchain's SummarizationMiddleware
does, which our own middleware chain cannot host as it is.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.runnables import RunnableConfig
from langgraph.constants import TAG_NOSTREAM

from waybill.common.config_file import SummarizationSection
from waybill.services.runner.reporting.run_journal import MIDDLEWARE_TAG

SUMMARY_PROMPT = """Summarize the conversation below for the assistant that continues it:
what the user wants, what was decided and done (files, tool results), what is still
open. Keep names, numbers and paths exactly. Reply with the summary alone."""

TRANSCRIPT_MAX_CHARS = 200_000


@dataclass(frozen=True)
class Summarized:
    summary: str
    kept: list[BaseMessage]
    removals: list[RemoveMessage]  # the summarized messages, out of the state


def over_budget(
    messages: Sequence[BaseMessage], summary: str, section: SummarizationSection, limit: int
) -> bool:
    if len(messages) > limit:
        return True
    text = [SystemMessage(summary)] if summary else []
    return count_tokens_approximately([*text, *messages]) > section.trigger_tokens


def cutoff(messages: Sequence[BaseMessage], keep: int) -> int:
    """Where the kept messages start: at most `keep` from the end, on a user's message
    (providers want the conversation to start with one); when the last `keep` hold
    none, `keep` from the end, moved back so that they never start with a tool result
    (its call stays with it). 0: nothing to summarize."""
    start = max(len(messages) - keep, 0)
    for index in range(start, len(messages)):
        if isinstance(messages[index], HumanMessage):
            return index
    while start > 0 and isinstance(messages[start], ToolMessage):
        start -= 1
    return start


def transcript(messages: Sequence[BaseMessage]) -> str:
    lines = []
    for message in messages:
        if isinstance(message, HumanMessage):
            lines.append(f"user: {message.text}")
        elif isinstance(message, AIMessage):
            calls = ", ".join(call["name"] for call in message.tool_calls)
            said = message.text + (f" [called {calls}]" if calls else "")
            lines.append(f"assistant: {said}")
        elif isinstance(message, ToolMessage):
            lines.append(f"tool {message.name}: {message.text}")
    return "\n".join(lines)[-TRANSCRIPT_MAX_CHARS:]


async def summarize(
    model: BaseChatModel,
    messages: Sequence[BaseMessage],
    summary: str,
    keep: int,
    config: RunnableConfig,
) -> Summarized | None:
    """The older messages summarized (None when all of them are to be kept)."""
    index = cutoff(messages, keep)
    if index == 0:
        return None
    older = messages[:index]
    earlier = f"Summary of what came before:\n{summary}\n\n" if summary else ""
    request = [SystemMessage(SUMMARY_PROMPT), HumanMessage(earlier + transcript(older))]
    # Counted as middleware, and kept off the run's `messages` stream.
    tags = [*(config.get("tags") or []), MIDDLEWARE_TAG, TAG_NOSTREAM]
    answer = await model.ainvoke(request, {**config, "tags": tags})
    return Summarized(
        summary=answer.text,
        kept=list(messages[index:]),
        removals=[RemoveMessage(id=m.id) for m in older if m.id],
    )
