"""A graph with a subgraph, to check subgraph frames (`mode|namespace`)."""

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict  # pydantic builds its JSON schema on 3.11


class Notes(TypedDict):
    notes: list[str]


def draft(state: Notes) -> Notes:
    return {"notes": [*state["notes"], "drafted"]}


def review(state: Notes) -> Notes:
    return {"notes": [*state["notes"], "reviewed"]}


inner = StateGraph(Notes)
inner.add_node("draft", draft)
inner.add_edge(START, "draft")
inner.add_edge("draft", END)

outer = StateGraph(Notes)
outer.add_node("writer", inner.compile())
outer.add_node("review", review)
outer.add_edge(START, "writer")
outer.add_edge("writer", "review")
outer.add_edge("review", END)
graph = outer.compile()
