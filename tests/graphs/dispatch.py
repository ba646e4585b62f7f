"""A graph a `Command` steers: `goto` a `Send` to `collect` with its own input, an
`update` as key/value pairs; `fail` makes `start` raise (a failed run's thread)."""

import operator
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict  # pydantic builds its JSON schema on 3.11


class State(TypedDict, total=False):
    items: Annotated[list[str], operator.add]
    fail: bool


def start(state: State) -> State:
    if state.get("fail"):
        raise ValueError("asked to fail")
    return {"items": ["started"]}


def collect(sent: dict) -> State:
    # A Send's input, not the thread's state.
    return {"items": [f"collected {sent['item']}"]}


builder = StateGraph(State)
builder.add_node("start", start)
builder.add_node("collect", collect)
builder.add_edge(START, "start")
builder.add_edge("start", END)
builder.add_edge("collect", END)
graph = builder.compile()
