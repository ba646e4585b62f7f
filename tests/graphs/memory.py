"""A graph that remembers in the long-term store, which the API serves too."""

from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime


class Note(TypedDict):
    owner: str
    text: str


async def remember(state: Note, runtime: Runtime) -> Note:
    assert runtime.store is not None, "the runner gives every graph its store"
    await runtime.store.aput(("notes", state["owner"]), "last", {"text": state["text"]})
    return state


builder = StateGraph(Note)
builder.add_node("remember", remember)
builder.add_edge(START, "remember")
builder.add_edge("remember", END)
graph = builder.compile()
