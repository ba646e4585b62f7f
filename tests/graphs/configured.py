"""A graph that reports the config and context it ran with, to show an assistant's
defaults reach the graph (and which of them a run overrode)."""

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict  # pydantic builds its JSON schema on 3.11


class Report(TypedDict, total=False):
    keys: list[str]  # which `configurable` keys to report
    seen_configurable: dict[str, Any]
    seen_context: dict[str, Any]


def report(state: Report, config: RunnableConfig, runtime: Runtime) -> Report:
    configurable = config.get("configurable") or {}
    return {
        "seen_configurable": {
            key: configurable[key] for key in state["keys"] if key in configurable
        },
        # All of it: the server adds no identity to a context without a schema.
        "seen_context": dict(runtime.context or {}),
    }


builder = StateGraph(Report)
builder.add_node("report", report)
builder.add_edge(START, "report")
builder.add_edge("report", END)
graph = builder.compile()
