"""A factory whose graph is shaped by the config it is called with: its steps are the
nodes `configurable.steps` names, in order (one step, `only`, without); with
`configurable.nested`, they sit in a subgraph `inner`."""

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict  # pydantic builds its JSON schema on 3.11


class Trail(TypedDict):
    trail: list[str]


def step(name: str):  # type: ignore[no-untyped-def]
    def record(state: Trail) -> Trail:
        return {"trail": [*state["trail"], name]}

    return record


def chain(steps: list[str]) -> StateGraph:
    builder = StateGraph(Trail)
    previous = START
    for name in steps:
        builder.add_node(name, step(name))
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder


def graph(config: RunnableConfig):  # type: ignore[no-untyped-def]
    configurable = config.get("configurable") or {}
    steps = chain(configurable.get("steps") or ["only"])
    if not configurable.get("nested"):
        return steps.compile()
    outer = StateGraph(Trail)
    outer.add_node("inner", steps.compile())
    outer.add_edge(START, "inner")
    outer.add_edge("inner", END)
    return outer.compile()
