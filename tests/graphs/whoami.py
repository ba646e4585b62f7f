"""Reports whom a run acts for, as the graph sees it: the caller the server
names in `runtime.server_info.user`, which context keys arrived, and digests
(never the values) of the request-scoped secrets it could open. With a `note`,
it also keeps the note in the store, under the run owner's namespaces."""

import hashlib
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict  # pydantic needs it for JSON schemas on 3.11


class Context(TypedDict, total=False):
    user_id: str
    role: str
    channel: dict[str, str]
    secrets: dict[str, str]
    note: str


class Report(TypedDict, total=False):
    question: str
    identity: dict[str, Any]
    context_keys: list[str]
    secret_digests: dict[str, str]


async def report(state: Report, runtime: Runtime[Context]) -> Report:
    context: dict[str, Any] = dict(runtime.context or {})
    if context.get("note"):
        assert runtime.store is not None
        await runtime.store.aput(("notes",), "last", {"text": context["note"]})
    secrets = context.get("secrets") or {}
    info = runtime.server_info
    user: dict[str, Any] = dict(info.user) if info is not None and info.user is not None else {}
    return {
        "identity": {
            "user_id": user.get("identity"),
            "role": user.get("role"),
            "channel": user.get("channel"),
        },
        "context_keys": sorted(context),
        "secret_digests": {
            name: hashlib.sha256(str(value).encode()).hexdigest() for name, value in secrets.items()
        },
    }


builder = StateGraph(Report, context_schema=Context)
builder.add_node("report", report)
builder.add_edge(START, "report")
builder.add_edge("report", END)
graph = builder.compile()
