"""A graph that runs with no model and no key: a context schema and a tool.

Try it once `waybill up` is running:

    from langgraph_sdk import get_client
    client = get_client(url="http://127.0.0.1:8080")
    thread = await client.threads.create()
    await client.runs.wait(thread["thread_id"], "agent",
        input={"messages": [{"role": "user", "content": "hello there"}]},
        context={"greeting": "Ahoy"})
"""

from __future__ import annotations

from dataclasses import dataclass

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.runtime import Runtime


@dataclass
class Context:
    """What a caller may pass as `context` with each run."""

    greeting: str = "Hello"


@tool
def count_words(text: str) -> int:
    """How many words `text` has."""
    return len(text.split())


def answer(state: MessagesState, runtime: Runtime[Context]) -> dict:
    said = str(state["messages"][-1].content)
    words = count_words.invoke({"text": said})
    reply = f"{runtime.context.greeting}! Your message has {words} words."
    return {"messages": [AIMessage(reply)]}


builder = StateGraph(MessagesState, context_schema=Context)
builder.add_node("answer", answer)
builder.add_edge(START, "answer")
builder.add_edge("answer", END)
graph = builder.compile()
