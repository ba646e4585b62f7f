"""Graph factories of every kind LangGraph Platform accepts (langgraph_api/graph.py).

Each builds the same one-node graph; the node shouts the text with `shoutlib` (from
the `./lib` dependency) and exclaims it with `srclib` (from `./pkg`, a src layout).
Every call of a factory, and every enter and exit of a context manager, is written
as a JSON line to the file named by FACTORY_PROJECT_LOG, so a test can see when and
how the server called it.
"""

import asyncio
import contextlib
import json
import os
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph_sdk.runtime import ServerRuntime
from shoutlib import shout
from srclib import exclaim
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    text: str
    seen: str


class Context(TypedDict, total=False):
    flavour: str


def record(graph_id: str, event: str, **facts: Any) -> None:
    with open(os.environ["FACTORY_PROJECT_LOG"], "a") as log:
        log.write(json.dumps({"graph": graph_id, "event": event, **facts}) + "\n")


def runtime_facts(runtime: ServerRuntime) -> dict[str, Any]:
    executing = runtime.execution_runtime
    return {
        "access_context": runtime.access_context,
        "executing": executing is not None,
        "context": dict(executing.context or {}) if executing else None,
        "user": runtime.user.identity if runtime.user else None,
        "has_store": runtime.store is not None,
    }


def build(seen: str) -> Any:
    async def respond(state: State) -> State:
        if state.get("text") == "fail":
            raise RuntimeError("asked to fail")
        if state.get("text") == "slow":
            await asyncio.sleep(60)
        return {"text": exclaim(shout(state.get("text", ""))), "seen": seen}

    builder = StateGraph(State, context_schema=Context)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    builder.add_edge("respond", END)
    return builder.compile()


def no_argument() -> Any:
    record("no_argument", "called")
    return build("no_argument")


async def async_no_argument() -> Any:
    record("async_no_argument", "called")
    return build("async_no_argument")


def from_config(config: RunnableConfig) -> Any:
    flavour = config["configurable"].get("flavour")
    record("from_config", "called", flavour=flavour)
    return build(f"from_config:{flavour}")


def from_runtime(runtime: ServerRuntime) -> Any:
    record("from_runtime", "called", **runtime_facts(runtime))
    return build("from_runtime")


async def from_both(runtime: ServerRuntime, config: RunnableConfig) -> Any:
    # Either order: the runtime is told apart by its annotation.
    facts = runtime_facts(runtime)
    record("from_both", "called", flavour=config["configurable"].get("flavour"), **facts)
    return build("from_both")


@contextlib.asynccontextmanager
async def held(runtime: ServerRuntime):  # type: ignore[no-untyped-def]
    record("held", "enter", **runtime_facts(runtime))
    try:
        yield build("held")
    finally:
        record("held", "exit", access_context=runtime.access_context)


@contextlib.contextmanager
def held_sync(config: RunnableConfig):  # type: ignore[no-untyped-def]
    record("held_sync", "enter")
    try:
        yield build("held_sync")
    finally:
        record("held_sync", "exit")


def fails_to_build(runtime: ServerRuntime) -> Any:
    """Builds for reads, raises for runs (a missing API key, say)."""
    if runtime.execution_runtime is not None:
        raise RuntimeError("no API key for the model")
    return build("fails_to_build")
