"""Subagents: the lead agent's `task` tool, through the gateway and langgraph-sdk.

The scripted lead agent delegates with `task`; the subagent (a YAML
`subagents` entry, scripted by the prompt it is given) runs inside the same
run. What is checked: its answer comes back as the task's tool message; its
events reach a `stream_subgraphs` client under its own namespace
(`updates|task:<id>`); its tokens are counted with source `subagents`; a
cancel of the run cancels it; and no more than the configured number run at
once. Embedded (SQLite) and on Postgres; the config's validation without a stack.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import after_its_end, tools
from tests.support.stacks import eventually, stack_in_mode
from waybill.common.config_file import ConfigError, read_config_file
from waybill.common.launch import Stack

MAX_PARALLEL = 2
SUBAGENTS = [
    {
        "name": "researcher",
        "description": "finds things out",
        "prompt": "You research what you are asked.",
        "tools": ["echo", "wait"],
        "model": "scripted",
    },
    {"name": "writer", "description": "writes", "prompt": "You write.", "tools": []},
]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp(f"stack-subagents-{request.param}")
    config = data_dir / "waybill.yaml"
    config.write_text(yaml.safe_dump({"subagents": SUBAGENTS}))
    env = {"WAYBILL_CONFIG": str(config), "WAYBILL_SUBAGENTS_MAX_PARALLEL": str(MAX_PARALLEL)}
    with stack_in_mode(request.param, data_dir, **env) as running:
        yield running


@pytest.fixture
def client_timeout() -> float:
    return 60  # conftest's `client`, longer: a run here waits on its subagents' runs


def delegate(subagent: str, prompt: str) -> tuple[str, dict[str, Any]]:
    return ("task", {"subagent": subagent, "prompt": prompt})


async def records(
    http: httpx.AsyncClient, thread_id: str, run_id: str, *types: str
) -> list[dict[str, Any]]:
    params = {"type": ",".join(types), "limit": 1000}
    reply = await http.get(f"/threads/{thread_id}/runs/{run_id}/events", params=params)
    assert reply.status_code == 200, reply.text
    listed: list[dict[str, Any]] = reply.json()
    return listed


def task_answers(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in state["values"]["messages"] if m["type"] == "tool" and m["name"] == "task"]


async def test_a_task_runs_its_subagent_whose_events_and_tokens_are_its_own(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    script = tools(delegate("researcher", '/tool echo {"text": "found it"}'))
    events = [
        (part.event, part.data)
        async for part in client.runs.stream(
            tid, "lead_agent", input=script, stream_mode="updates", stream_subgraphs=True
        )
    ]
    [run] = await client.runs.list(tid)
    run = await after_its_end(client, tid, run["run_id"])

    assert run["status"] == "success"
    [answer] = task_answers(await client.threads.get_state(tid))
    assert answer["status"] == "success"
    assert answer["content"] == "Tool echo returned: found it"
    # The lead agent's own steps are plain `updates`; the subagent's come namespaced.
    plain = [data for name, data in events if name == "updates"]
    assert [next(iter(update)) for update in plain] == ["agent", "task", "agent"]
    namespaced = [(name, data) for name, data in events if name.startswith("updates|")]
    namespaces = {name for name, _ in namespaced}
    assert len(namespaces) == 1
    [namespace] = namespaces
    assert namespace.startswith("updates|task:")
    assert [next(iter(update)) for _, update in namespaced] == ["agent", "tools", "agent"]
    [echoed] = namespaced[1][1]["tools"]["messages"]
    assert (echoed["name"], echoed["content"]) == ("echo", "found it")

    started, ended = [r["data"] for r in await records(http, tid, run["run_id"], "subagent")]
    assert started["action"] == "started" and started["subagent"] == "researcher"
    assert started["tools"] == ["echo", "wait"]
    assert "task:" + started["namespace"].split("task:", 1)[1] == namespace.split("|", 1)[1]
    assert ended["status"] == "success" and ended["answer"] == answer["content"]
    # Two model calls each: the lead's (call the task, report it) and the subagent's.
    by_source = run["usage"]["by_source"]
    assert by_source["lead_agent"]["llm_calls"] == 2
    assert by_source["subagents"]["llm_calls"] == 2
    assert by_source["subagents"]["total_tokens"] > 0
    llm_ends = [r["data"] for r in await records(http, tid, run["run_id"], "llm_end")]
    assert [e["source"] for e in llm_ends] == ["lead_agent", "subagents", "subagents", "lead_agent"]


async def test_an_unknown_subagent_is_a_tool_error_and_the_run_goes_on(
    client: LangGraphClient,
) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    run = await client.runs.create(tid, "lead_agent", input=tools(delegate("nobody", "hi")))
    run = await after_its_end(client, tid, run["run_id"])

    assert run["status"] == "success"
    [answer] = task_answers(await client.threads.get_state(tid))
    assert answer["status"] == "error"
    assert answer["content"] == "no subagent 'nobody'; known: researcher, writer"


async def test_cancelling_the_run_cancels_its_subagent(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    script = tools(delegate("researcher", '/tool wait {"seconds": 120}'))
    run = await client.runs.create(tid, "lead_agent", input=script)
    rid = run["run_id"]

    async def waiting() -> bool:
        started = await records(http, tid, rid, "tool_start")
        return any(r["data"]["name"] == "wait" for r in started)

    await eventually(waiting, "the subagent's wait tool running")
    await client.runs.cancel(tid, rid)
    ended = await after_its_end(client, tid, rid)

    assert ended["status"] == "interrupted"
    listed = await records(http, tid, rid, "subagent", "tool_end")
    assert [(r["type"], r["data"].get("action")) for r in listed] == [
        ("subagent", "started"),
        ("subagent", "ended"),
    ]
    assert listed[1]["data"]["status"] == "cancelled"
    # The wait never finished: no tool_end for it (the task's call is closed by the runner).
    assert not [r for r in listed if r["type"] == "tool_end"]


async def test_subagents_run_side_by_side_within_the_limit(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    wait = '/tool wait {"seconds": 1}'
    calls = [{"name": "task", "args": {"subagent": "researcher", "prompt": wait}}] * 3
    given = {"messages": [{"role": "user", "content": "/tools " + json.dumps([calls])}]}
    run = await client.runs.create(tid, "lead_agent", input=given)
    run = await after_its_end(client, tid, run["run_id"])

    assert run["status"] == "success"
    answers = task_answers(await client.threads.get_state(tid))
    assert [a["content"] for a in answers] == ["Tool wait returned: waited 1 s"] * 3
    working, most = 0, 0
    for record in await records(http, tid, run["run_id"], "subagent"):
        working += 1 if record["data"]["action"] == "started" else -1
        most = max(most, working)
    assert most == MAX_PARALLEL


# ---- the config, validated strictly ----------------------------------------------------


def config_with(tmp_path: Path, **sections: Any) -> Path:
    path = tmp_path / "waybill.yaml"
    path.write_text(yaml.safe_dump(sections))
    return path


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ({"tools": ["task"]}, "may not use `task`"),
        ({"tools": ["ask_clarification"]}, "may not use `ask_clarification`"),
        ({"model": "gpt-9"}, "model 'gpt-9' is not in `models` (scripted)"),
        ({"name": "has space"}, "subagents.0.name: String should match pattern"),
        ({"max_turns": 0}, "subagents.0.max_turns: Input should be greater than 0"),
        ({"promt": "typo"}, "unknown key `subagents.0.promt` (did you mean `prompt`?)"),
    ],
)
def test_a_subagent_entry_is_checked_at_start_up(
    tmp_path: Path, entry: dict[str, Any], said: str
) -> None:
    base = {"name": "a", "description": "d", "prompt": "p"}
    with pytest.raises(ConfigError) as refused:
        read_config_file(config_with(tmp_path, subagents=[{**base, **entry}]))
    assert said in str(refused.value)


def test_subagent_names_are_unique(tmp_path: Path) -> None:
    agent = {"name": "a", "description": "d", "prompt": "p"}
    with pytest.raises(ConfigError, match="each name once"):
        read_config_file(config_with(tmp_path, subagents=[agent, agent]))


def test_sandbox_section_is_checked_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sandbox.provider"):
        read_config_file(config_with(tmp_path, sandbox={"provider": "docker"}))
    with pytest.raises(ConfigError, match="did you mean `cpu_seconds`"):
        read_config_file(config_with(tmp_path, sandbox={"cpu_second": 3}))
    spec = read_config_file(config_with(tmp_path, sandbox={"network": True})).sandbox
    assert spec is not None and spec.network and spec.provider == "local"
