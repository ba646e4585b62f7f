"""Long-term memory: facts about a user, kept in the store, shown in their prompts.

After a run of the lead agent ends, the model reads the conversation and answers
the facts worth keeping about the user (`extract_facts`); the runner stores them
(`remember`, in after_run.py, only once admission accepted the run's epoch). Every
later run of that user shows them in its system prompt (`recall`). The API lists,
changes and deletes them (the runner's memory RPCs).

A user's facts live at ("users", <user>, "memory") of the runner's store: for
Waybill's own principals that is their own store namespace ["memory"]
(owned_store.py), whatever the store auth of a project, so no user reaches
another's. One item per fact: its key the fact's id, its value
{"fact", "thread_id", "run_id"}.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.store.base import BaseStore, Item

from waybill.common import codec
from waybill.common.errors import ServiceError, invalid
from waybill.common.secret_scan import refuse_stored_secrets
from waybill.services.runner.persistence.owned_store import (
    USERS,
    OutsideOwned,
    OwnedStore,
    owner_label,
)

MEMORY = "memory"
FACT_MAX_CHARS = 1000
LIST_MAX = 1000  # the most facts a user may have (memory.max_facts is at most this)
TRANSCRIPT_MAX_CHARS = 20_000  # the newest part of a long conversation

EXTRACTION_PROMPT = """You keep the long-term memory of an assistant about one user.
Read the conversation below and list the facts about the user worth remembering in
later conversations: who they are, their preferences, their projects, what they asked
to be remembered. Only durable facts, each one short sentence; nothing already known.
Known facts:
{known}
Reply with a JSON object {{"facts": ["...", ...]}} and nothing else ({{"facts": []}} when
there is nothing new)."""


@dataclass(frozen=True)
class Fact:
    fact_id: str
    fact: str
    thread_id: str = ""
    run_id: str = ""
    created_at: str = ""
    updated_at: str = ""


def memory_namespace(user_id: str) -> tuple[str, ...]:
    return (USERS, owner_label(user_id), MEMORY)


def unconfined(store: BaseStore) -> BaseStore:
    """The store itself, under a user's view of it (memory names the user's prefix)."""
    return store.inner if isinstance(store, OwnedStore | OutsideOwned) else store


def _fact_of(item: Item) -> Fact | None:
    value = item.value if isinstance(item.value, dict) else {}
    text = value.get("fact")
    if not isinstance(text, str) or not text.strip():
        return None  # an item put there by hand, not a fact
    return Fact(
        fact_id=item.key,
        fact=text,
        thread_id=str(value.get("thread_id") or ""),
        run_id=str(value.get("run_id") or ""),
        created_at=codec.iso(item.created_at),
        updated_at=codec.iso(item.updated_at),
    )


async def recall(store: BaseStore, user_id: str, limit: int) -> list[Fact]:
    """The user's facts, oldest first (at most `limit`, the newest)."""
    items = await unconfined(store).asearch(memory_namespace(user_id), limit=limit)
    facts = [fact for fact in map(_fact_of, items) if fact is not None]
    facts.sort(key=lambda fact: (fact.created_at, fact.fact_id))
    return facts[-limit:]


def checked_fact(text: str) -> str:
    """A fact's text, whitespace folded; refused (invalid) when empty, too long or
    holding a credential."""
    text = " ".join(text.split())
    if not text:
        raise invalid("fact must not be empty.")
    if len(text) > FACT_MAX_CHARS:
        raise invalid(f"fact must be at most {FACT_MAX_CHARS} characters.")
    refuse_stored_secrets({"fact": text})
    return text


async def put_fact(
    store: BaseStore,
    user_id: str,
    text: str,
    fact_id: str = "",
    thread_id: str = "",
    run_id: str = "",
) -> Fact:
    """Write one fact (a new one without `fact_id`); KeyError for an unknown `fact_id`."""
    inner = unconfined(store)
    namespace = memory_namespace(user_id)
    text = checked_fact(text)
    if fact_id:
        item = await inner.aget(namespace, fact_id)
        found = _fact_of(item) if item is not None else None
        if found is None:
            raise KeyError(fact_id)
        thread_id, run_id = found.thread_id, found.run_id
    fact_id = fact_id or uuid.uuid4().hex
    value = {"fact": text, "thread_id": thread_id, "run_id": run_id}
    await inner.aput(namespace, fact_id, value, index=False)
    written = await inner.aget(namespace, fact_id)
    assert written is not None
    fact = _fact_of(written)
    assert fact is not None
    return fact


async def delete_fact(store: BaseStore, user_id: str, fact_id: str) -> None:
    """Forget one fact; KeyError when the user has none of that id."""
    inner = unconfined(store)
    namespace = memory_namespace(user_id)
    if await inner.aget(namespace, fact_id) is None:
        raise KeyError(fact_id)
    await inner.adelete(namespace, fact_id)


async def remember(
    store: BaseStore,
    user_id: str,
    facts: Sequence[str],
    max_facts: int,
    thread_id: str,
    run_id: str,
) -> list[Fact]:
    """Add the new facts (not those known already), then forget the oldest beyond
    `max_facts`. Returns the facts added."""
    known = await recall(store, user_id, LIST_MAX)
    seen = {fact.fact.casefold() for fact in known}
    added: list[Fact] = []
    for text in facts:
        try:
            text = checked_fact(text)
        except ServiceError:
            continue  # a model's fact that cannot be kept (empty, a credential...)
        if text.casefold() in seen:
            continue
        seen.add(text.casefold())
        added.append(await put_fact(store, user_id, text, thread_id=thread_id, run_id=run_id))
    overflow = len(known) + len(added) - max_facts
    for old in (known + added)[: max(overflow, 0)]:
        await unconfined(store).adelete(memory_namespace(user_id), old.fact_id)
    return added


def prompt_section(facts: Sequence[Fact]) -> str:
    """What the system prompt says about the user (empty without facts)."""
    if not facts:
        return ""
    lines = "\n".join(f"- {fact.fact}" for fact in facts)
    return f"What you remember about the user (from earlier conversations):\n{lines}"


def transcript(messages: Sequence[BaseMessage]) -> str:
    """The conversation as `user:` / `assistant:` lines (tool traffic left out)."""
    lines = []
    for message in messages:
        if isinstance(message, HumanMessage):
            lines.append(f"user: {message.text}")
        elif isinstance(message, AIMessage) and message.text:
            lines.append(f"assistant: {message.text}")
    return "\n".join(lines)[-TRANSCRIPT_MAX_CHARS:]


def extraction_request(messages: Sequence[BaseMessage], known: Sequence[Fact]) -> list[BaseMessage]:
    listed = "\n".join(f"- {fact.fact}" for fact in known) or "(none)"
    return [
        SystemMessage(EXTRACTION_PROMPT.format(known=listed)),
        HumanMessage(transcript(messages)),
    ]


def facts_in(answer: str) -> list[str]:
    """The facts of the model's answer: a JSON object {"facts": [...]}, possibly in a
    code fence; anything else holds none."""
    found = re.search(r"\{.*\}", answer, re.DOTALL)
    try:
        parsed: Any = json.loads(found.group(0)) if found else None
    except json.JSONDecodeError:
        return []
    facts = parsed.get("facts") if isinstance(parsed, dict) else None
    if not isinstance(facts, list):
        return []
    return [fact for fact in facts if isinstance(fact, str) and fact.strip()]


async def extract_facts(
    model: BaseChatModel, messages: Sequence[BaseMessage], known: Sequence[Fact]
) -> tuple[list[str], AIMessage]:
    """The new facts the model found in the conversation, and its answer (for its usage)."""
    answer = await model.ainvoke(extraction_request(messages, known))
    assert isinstance(answer, AIMessage)
    return facts_in(answer.text), answer
