"""Graphs a careless user writes, each bounded so that a test stays quick:

- `steady`: a well-behaved async node: `ticks` custom events, `interval` seconds apart.
- `blocker`: an async node that calls `time.sleep(block_seconds)`, blocking the
  runner's event loop.
- `stuck`: a sync node that does not return until the file `release_file` exists
  (the test creates it at teardown; at most 120 s).
- `huge`: a node that puts `size` bytes into the state.
- `broken`: a graph factory that raises.
"""

import asyncio
import time
from pathlib import Path

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict


class Work(TypedDict, total=False):
    ticks: int
    interval: float
    block_seconds: float
    release_file: str
    size: int
    blob: str
    done: str


async def tick(state: Work) -> Work:
    write = get_stream_writer()
    for i in range(int(state.get("ticks", 10))):
        write({"tick": i})
        await asyncio.sleep(float(state.get("interval", 0.1)))
    return {"done": "ticked"}


async def block(state: Work) -> Work:
    time.sleep(float(state.get("block_seconds", 1.0)))  # noqa: ASYNC251 (the careless part)
    return {"done": "blocked"}


def wait_for_release(state: Work) -> Work:
    release = Path(state["release_file"])
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"done": "released"}


def fill(state: Work) -> Work:
    return {"blob": "x" * int(state.get("size", 0)), "done": "filled"}


def one_node(name: str, node: object) -> object:
    builder = StateGraph(Work)
    builder.add_node(name, node)  # type: ignore[call-overload]
    builder.add_edge(START, name)
    builder.add_edge(name, END)
    return builder.compile()


steady = one_node("tick", tick)
blocker = one_node("block", block)
stuck = one_node("wait_for_release", wait_for_release)
huge = one_node("fill", fill)


def broken(config: dict) -> object:
    raise RuntimeError("the graph's settings file is missing")
