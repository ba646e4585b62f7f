"""Greets with a variable set only in the project's `env`, read when the node runs."""

import os

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    text: str


def greet(state: State) -> State:
    return {"text": os.environ["PROJECT_GREETING"]}


builder = StateGraph(State)
builder.add_node("greet", greet)
builder.add_edge(START, "greet")
builder.add_edge("greet", END)
graph = builder.compile()
