"""A graph with an output schema and a private channel: its last `values` event
(the output schema applied) differs from the thread's state."""

import asyncio

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    question: str
    scratch: str
    answer: str


class Output(TypedDict, total=False):
    answer: str


async def think(state: State) -> State:
    if state.get("question", "").startswith("slow"):
        await asyncio.sleep(float(state["question"].split()[-1]))
    return {"scratch": "private notes", "answer": f"answer to {state.get('question', '')}"}


builder = StateGraph(State, output_schema=Output)
builder.add_node("think", think)
builder.add_edge(START, "think")
builder.add_edge("think", END)
graph = builder.compile()
