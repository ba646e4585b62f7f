"""A graph that pauses for a human: `interrupt()` asks, `Command(resume=...)` answers."""

from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class Request(TypedDict, total=False):
    action: str
    decision: str


def ask(state: Request) -> Request:
    answer = interrupt({"question": f"approve {state['action']}?"})
    return {"decision": f"{state['action']}: {answer}"}


builder = StateGraph(Request)
builder.add_node("ask", ask)
builder.add_edge(START, "ask")
builder.add_edge("ask", END)
graph = builder.compile()
