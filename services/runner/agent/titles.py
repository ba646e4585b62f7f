"""A new thread's title: made by the model from the first exchange, after the
thread's first run of the lead agent, and kept in the thread's metadata (`title`).

Admission owns thread metadata: the runner sets the title through PatchThread's
`metadata_if_absent`, so a title the user set (before or meanwhile) stays.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

TITLE_KEY = "title"

TITLE_PROMPT = """Write a short title (a few words) for the conversation that begins with
the user's message below. Reply with the title alone: no quotes, no full stop."""


def wants_title(messages: Sequence[BaseMessage], metadata: dict[str, object]) -> bool:
    """After the thread's first exchange (one user message, answered), when it has none."""
    if metadata.get(TITLE_KEY):
        return False
    asked = [m for m in messages if isinstance(m, HumanMessage)]
    return len(asked) == 1 and isinstance(messages[-1], AIMessage) if messages else False


def clean_title(answer: str, max_chars: int) -> str:
    """One line, without quotes or a final full stop, at most `max_chars`."""
    title = " ".join(answer.split()).strip().strip("\"'`").rstrip(".").strip()
    if len(title) > max_chars:
        title = title[: max_chars - 1].rstrip() + "…"
    return title


async def make_title(
    model: BaseChatModel, messages: Sequence[BaseMessage], max_chars: int
) -> tuple[str, AIMessage]:
    """The title, and the model's answer (for its usage)."""
    first = next(m for m in messages if isinstance(m, HumanMessage))
    answer = await model.ainvoke([SystemMessage(TITLE_PROMPT), HumanMessage(first.text)])
    assert isinstance(answer, AIMessage)
    return clean_title(answer.text, max_chars), answer
