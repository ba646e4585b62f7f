"""A graph that cannot be drawn nor list its subgraphs (a Pregel of its own kind
may not implement them): the server answers 422, not a crash."""

from collections.abc import AsyncIterator
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict  # pydantic builds its JSON schema on 3.11


class Note(TypedDict):
    note: str


class Undrawable(CompiledStateGraph):  # type: ignore[type-arg]
    async def aget_graph(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def aget_subgraphs(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError
        yield


builder = StateGraph(Note)
builder.add_node("write", lambda state: {"note": "written"})
builder.add_edge(START, "write")
builder.add_edge("write", END)
compiled = builder.compile()
# The same graph, of the kind that cannot be drawn (as Pregel.copy makes a copy).
graph = Undrawable(**{k: v for k, v in compiled.__dict__.items() if k != "__orig_class__"})
