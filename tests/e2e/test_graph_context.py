"""The context belongs to the graph: a run's `context` reaches the graph as the
client sent it (narrowed to what its schema declares, as on LangGraph
Platform), the caller is in `configurable` where LangGraph Platform puts it, and
Waybill's own conventions (the model allowlist) stay
with the graphs that ask for them. Auth on, with principals from the YAML config,
on SQLite and Postgres."""

from __future__ import annotations

import hashlib
import json
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

from tests.support.auth_stack import auth_stack_in_mode, sdk_with_key
from tests.support.helpers import says
from waybill.common.identity import ROLE_SCOPES
from waybill.common.launch import Stack

KEYS = {"alice": "alice-ctx-key-01", "bob": "bob-ctx-key-02"}
SECRETS_KEY = "pM0SmMQ0PyMXd0Qp-9D2vBc3cFdNhMd9k3LqRymnYkI="

# What every graph of the project reports: its context, and what the server put
# in `configurable` and `runtime.server_info`.
REPORT_PY = """
import dataclasses
import hashlib
from typing import Any

SEEN = (
    "tone",
    "langgraph_auth_user_id",
    "langgraph_auth_permissions",
    "user_id",
    "run_id",
    "thread_id",
    "assistant_id",
    "graph_id",
    "model_name",
)


def _user(user: Any) -> Any:
    if user is None:
        return None
    return {
        "as_dict": dict(user),
        "by_attribute": [user.identity, user.display_name, user.is_authenticated, user.permissions],
        "by_item": user["identity"],
    }


def report(state: dict, config: dict, runtime: Any) -> dict:
    context = runtime.context
    configurable = config.get("configurable") or {}
    server = runtime.server_info
    seen = dataclasses.asdict(context) if dataclasses.is_dataclass(context) else dict(context)
    secrets = seen.pop("secrets", None) or {}
    return {
        "context": seen,
        "context_type": type(context).__name__,
        "secret_digests": {
            name: hashlib.sha256(value.encode()).hexdigest() for name, value in secrets.items()
        },
        "seen_configurable": {key: configurable[key] for key in SEEN if key in configurable},
        "auth_user": _user(configurable.get("langgraph_auth_user")),
        "execution_run_id": runtime.execution_info.run_id,
        "server_info": None
        if server is None
        else {
            "assistant_id": server.assistant_id,
            "graph_id": server.graph_id,
            "user": _user(server.user),
        },
    }
"""

GRAPHS_PY = """
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from ctx_report import report


@dataclass
class Settings:  # as LangGraph's docs write a context schema
    tone: str
    level: int = 1


class Identity(TypedDict, total=False):  # declares the names Waybill's principals have
    user_id: str
    role: str
    channel: dict
    model_name: str
    secrets: dict


class State(TypedDict, total=False):
    question: str
    context: dict
    context_type: str
    secret_digests: dict
    seen_configurable: dict
    auth_user: Any
    execution_run_id: Any
    server_info: Any


def node(state: State, config: RunnableConfig, runtime: Runtime) -> State:
    return report(state, config, runtime)


def build(context_schema: Any) -> Any:
    builder = StateGraph(State, context_schema=context_schema)
    builder.add_node("report", node)
    builder.add_edge(START, "report")
    builder.add_edge("report", END)
    return builder.compile()


settings_graph = build(Settings)
identity_graph = build(Identity)
schemaless_graph = build(None)
"""


def write_project(root: Path) -> Path:
    (root / "ctx_report.py").write_text(textwrap.dedent(REPORT_PY))
    (root / "graphs.py").write_text(textwrap.dedent(GRAPHS_PY))
    manifest = root / "langgraph.json"
    graphs = {
        "settings": "./graphs.py:settings_graph",
        "identity": "./graphs.py:identity_graph",
        "schemaless": "./graphs.py:schemaless_graph",
    }
    manifest.write_text(json.dumps({"graphs": graphs}))
    return manifest


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    manifest = write_project(tmp_path_factory.mktemp("context-project"))
    data_dir = tmp_path_factory.mktemp(f"stack-context-{request.param}")
    with auth_stack_in_mode(
        request.param,
        data_dir,
        KEYS,
        {},
        WAYBILL_GRAPHS=str(manifest),
        WAYBILL_SECRETS_KEY=SECRETS_KEY,
    ) as running:
        yield running


@pytest.fixture
async def alice(stack: Stack) -> AsyncIterator[LangGraphClient]:
    async with sdk_with_key(stack, KEYS["alice"]) as client:
        yield client


@pytest.fixture
async def bob(stack: Stack) -> AsyncIterator[LangGraphClient]:
    async with sdk_with_key(stack, KEYS["bob"]) as client:
        yield client


async def run_and_read(
    client: LangGraphClient, graph_id: str, **run: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run `graph_id` to its end; what the graph reported, and the stored run."""
    thread = await client.threads.create()
    created = await client.runs.create(
        thread["thread_id"], graph_id, input={"question": "?"}, **run
    )
    values = await client.runs.join(thread["thread_id"], created["run_id"])
    stored = await client.runs.get(thread["thread_id"], created["run_id"])
    assert stored["status"] == "success", values
    assert isinstance(values, dict)
    return values, stored


def user_of(user_id: str) -> dict[str, Any]:
    """The caller as a graph reads it from `langgraph_auth_user`."""
    permissions = sorted(ROLE_SCOPES["user"])
    as_dict = {
        "identity": user_id,
        "permissions": permissions,
        "display_name": user_id,
        "is_authenticated": True,
        "role": "user",
    }
    return {
        "as_dict": as_dict,
        "by_attribute": [user_id, user_id, True, permissions],
        "by_item": user_id,
    }


# ---- the client's context -------------------------------------------------------------


async def test_a_dataclass_context_reaches_the_graph_as_sent(alice: LangGraphClient) -> None:
    values, stored = await run_and_read(alice, "settings", context={"tone": "formal", "level": 2})
    assert values["context_type"] == "Settings"
    assert values["context"] == {"tone": "formal", "level": 2}
    assert stored["kwargs"]["context"] == {"tone": "formal", "level": 2}  # nothing added


async def test_keys_the_schema_does_not_declare_are_left_out_as_on_the_platform(
    alice: LangGraphClient,
) -> None:
    # LangGraph Platform passes the graph the declared keys only (its run does not
    # fail on the others) and stores the context as sent.
    sent = {"tone": "dry", "user_id": "mallory", "extra": 1}
    values, stored = await run_and_read(alice, "settings", context=sent)
    assert values["context"] == {"tone": "dry", "level": 1}
    assert stored["kwargs"]["context"] == sent


async def test_context_and_configurable_mirror_each_other_as_on_the_platform(
    alice: LangGraphClient,
) -> None:
    # A context alone is also the run's configurable (a graph may read either)...
    values, _ = await run_and_read(alice, "settings", context={"tone": "mirrored"})
    assert values["seen_configurable"]["tone"] == "mirrored"
    # ...and a configurable alone, as older clients send it, is also its context.
    values, stored = await run_and_read(
        alice, "settings", config={"configurable": {"tone": "old-style"}}
    )
    assert values["context"] == {"tone": "old-style", "level": 1}
    assert stored["kwargs"]["context"] == {"tone": "old-style"}


async def test_a_context_the_schema_rejects_fails_the_run_not_the_request(
    alice: LangGraphClient,
) -> None:
    # As on LangGraph Platform: the run is accepted, then ends in `error` with the
    # schema's own complaint (here a dataclass missing a required field).
    thread = await alice.threads.create()
    run = await alice.runs.create(
        thread["thread_id"], "settings", input={"question": "?"}, context={"level": 2}
    )
    joined = await alice.runs.join(thread["thread_id"], run["run_id"])
    stored = await alice.runs.get(thread["thread_id"], run["run_id"])
    assert stored["status"] == "error"
    assert isinstance(joined, dict)
    assert joined["__error__"]["error"] == "TypeError"
    assert "tone" in joined["__error__"]["message"]


async def test_a_graph_without_a_schema_gets_every_key_as_sent(alice: LangGraphClient) -> None:
    sent = {"anything": [1, 2], "user_id": "not-an-identity-here"}
    values, stored = await run_and_read(alice, "schemaless", context=sent)
    assert values["context"] == sent
    assert stored["kwargs"]["context"] == sent
    assert values["seen_configurable"]["langgraph_auth_user_id"] == "alice"  # the identity is here


async def test_secrets_are_opened_for_a_schema_that_declares_them_only(
    alice: LangGraphClient,
) -> None:
    secret = "s3cr3t-value"
    digest = hashlib.sha256(secret.encode()).hexdigest()
    values, stored = await run_and_read(alice, "identity", context={"secrets": {"db": secret}})
    assert values["secret_digests"] == {"db": digest}
    assert stored["kwargs"]["context"]["secrets"] == {"db": "[redacted]"}
    # A dataclass that does not declare them is not handed them (nor broken by them).
    values, stored = await run_and_read(
        alice, "settings", context={"tone": "x", "secrets": {"db": secret}}
    )
    assert values["context"] == {"tone": "x", "level": 1}
    assert values["secret_digests"] == {}
    assert stored["kwargs"]["context"]["secrets"] == {"db": "[redacted]"}


# ---- the caller, where LangGraph Platform puts it --------------------------------------


async def test_the_caller_is_in_configurable_and_the_server_info(alice: LangGraphClient) -> None:
    values, stored = await run_and_read(alice, "settings", context={"tone": "x"})
    configurable = values["seen_configurable"]
    assert configurable["langgraph_auth_user_id"] == "alice"
    assert configurable["langgraph_auth_permissions"] == sorted(ROLE_SCOPES["user"])
    # As on LangGraph Platform, `user_id` is the caller's when the client sent none.
    assert configurable["user_id"] == "alice"
    assert values["auth_user"] == user_of("alice")
    ids = {key: stored[key] for key in ("run_id", "thread_id", "assistant_id")}
    assert {key: configurable[key] for key in ids} == ids
    assert configurable["graph_id"] == "settings"
    assert values["execution_run_id"] == stored["run_id"]
    assert values["server_info"] == {
        "assistant_id": stored["assistant_id"],
        "graph_id": "settings",
        "user": user_of("alice"),
    }
    stored_configurable = stored["kwargs"]["config"]["configurable"]
    assert stored_configurable["langgraph_auth_user"] == user_of("alice")["as_dict"]


async def test_a_client_cannot_forge_the_caller(bob: LangGraphClient) -> None:
    forged = {
        "langgraph_auth_user": {"identity": "alice", "permissions": ["admin"]},
        "langgraph_auth_user_id": "alice",
        "langgraph_auth_permissions": ["admin"],
        "user_id": "alice",
    }
    values, _ = await run_and_read(
        bob,
        "identity",
        config={"configurable": forged},
        context={"user_id": "alice", "role": "admin", "channel": {"platform": "x"}},
    )
    assert values["auth_user"] == user_of("bob")
    assert values["seen_configurable"]["langgraph_auth_user_id"] == "bob"
    assert values["seen_configurable"]["langgraph_auth_permissions"] == sorted(ROLE_SCOPES["user"])
    # `user_id`, `role` and `channel` are the graph's own fields, the client's as
    # on LangGraph Platform (issue 39): they name nobody to the server.
    assert values["seen_configurable"]["user_id"] == "alice"
    assert values["context"] == {"user_id": "alice", "role": "admin", "channel": {"platform": "x"}}


async def test_a_typeddict_declaring_identity_names_gets_nothing_added(
    alice: LangGraphClient,
) -> None:
    values, stored = await run_and_read(alice, "identity", context={"model_name": "mine"})
    assert values["context_type"] == "dict"
    assert values["context"] == {"model_name": "mine"}
    assert stored["kwargs"]["context"] == values["context"]


# ---- the model allowlist is lead_agent's ----------------------------------------------


async def test_a_user_graphs_model_name_is_its_own(alice: LangGraphClient, stack: Stack) -> None:
    values, _ = await run_and_read(alice, "identity", context={"model_name": "gpt-99"})
    assert values["context"]["model_name"] == "gpt-99"
    values, _ = await run_and_read(
        alice, "settings", config={"configurable": {"model_name": "gpt-99"}}, context={"tone": "t"}
    )
    assert values["seen_configurable"]["model_name"] == "gpt-99"
    # The built-in agent's model still comes from the allowlist.
    thread = await alice.threads.create()
    async with httpx.AsyncClient(
        base_url=stack.url, headers={"x-api-key": KEYS["alice"]}, timeout=30
    ) as http:
        for model in (
            {"context": {"model_name": "gpt-99"}},
            {"config": {"configurable": {"model_name": "gpt-99"}}},
        ):
            reply = await http.post(
                f"/threads/{thread['thread_id']}/runs",
                json={"assistant_id": "lead_agent", "input": says("hi"), **model},
            )
            assert reply.status_code == 400, reply.text
            assert "scripted" in reply.json()["detail"]
