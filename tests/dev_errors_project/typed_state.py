"""A state declared with `typing.TypedDict`: harmless to LangGraph, but pydantic
cannot build its JSON schema on Python < 3.12."""

from typing import TypedDict

from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    count: int


def add_one(state: State) -> dict:
    return {"count": state.get("count", 0) + 1}


builder = StateGraph(State)
builder.add_node("add_one", add_one)
builder.add_edge(START, "add_one")
builder.add_edge("add_one", END)
graph = builder.compile()
