"""Two levels of subgraph: outer -> middle (compiled) -> inner (compiled)."""

import operator
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict


class Notes(TypedDict):
    notes: Annotated[list[str], operator.add]


def draft(state: Notes) -> Notes:
    return {"notes": ["drafted"]}


def polish(state: Notes) -> Notes:
    return {"notes": ["polished"]}


def review(state: Notes) -> Notes:
    return {"notes": ["reviewed"]}


inner_builder = StateGraph(Notes)
inner_builder.add_node("draft", draft)
inner_builder.add_edge(START, "draft")
inner_builder.add_edge("draft", END)
inner = inner_builder.compile(name="inner")

middle_builder = StateGraph(Notes)
middle_builder.add_node("inner", inner)
middle_builder.add_node("polish", polish)
middle_builder.add_edge(START, "inner")
middle_builder.add_edge("inner", "polish")
middle_builder.add_edge("polish", END)
middle = middle_builder.compile(name="middle")

outer = StateGraph(Notes)
outer.add_node("writer", middle)
outer.add_node("review", review)
outer.add_edge(START, "writer")
outer.add_edge("writer", "review")
outer.add_edge("review", END)
graph = outer.compile()
