"""Emits `ticks` custom events, `interval` seconds apart, each padded to about
`size` bytes: a run whose stream length and pace a test controls."""

import asyncio

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict


class Ticks(TypedDict, total=False):
    ticks: int
    interval: float
    size: int
    done: int


async def tick(state: Ticks) -> Ticks:
    write = get_stream_writer()
    pad = "x" * int(state.get("size", 0))
    for i in range(int(state.get("ticks", 10))):
        write({"tick": i, "pad": pad})
        await asyncio.sleep(float(state.get("interval", 0.0)))
    return {"done": int(state.get("ticks", 10))}


builder = StateGraph(Ticks)
builder.add_node("tick", tick)
builder.add_edge(START, "tick")
builder.add_edge("tick", END)
graph = builder.compile()
