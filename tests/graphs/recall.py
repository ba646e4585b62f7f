"""LangChain's memory-agent template in small: the client chooses `context.user_id`,
the graph keeps each message as a memory under `("memories", user_id)` and
answers what it remembers there, with the `user_id` it saw in its context and in
its `configurable` (a graph's own fields, which the server must not rewrite)."""

import uuid
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11


class Context(TypedDict, total=False):
    user_id: str
    role: str
    channel: str


class Recall(TypedDict, total=False):
    remember: str
    memories: list[str]
    seen_context: dict[str, Any]
    seen_configurable_user_id: Any


async def recall(state: Recall, config: RunnableConfig, runtime: Runtime[Context]) -> Recall:
    context: dict[str, Any] = dict(runtime.context or {})
    assert runtime.store is not None
    namespace = ("memories", str(context.get("user_id", "nobody")))
    if state.get("remember"):
        await runtime.store.aput(namespace, uuid.uuid4().hex, {"text": state["remember"]})
    found = await runtime.store.asearch(namespace, limit=50)
    return {
        "memories": sorted(item.value["text"] for item in found),
        "seen_context": context,
        "seen_configurable_user_id": (config.get("configurable") or {}).get("user_id"),
    }


builder = StateGraph(Recall, context_schema=Context)
builder.add_node("recall", recall)
builder.add_edge(START, "recall")
builder.add_edge("recall", END)
graph = builder.compile()
