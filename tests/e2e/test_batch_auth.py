"""`POST /runs/batch` with the project's auth: each item is admitted under the filter
its own `threads.create_run` call returned, not under another item's."""

from __future__ import annotations

import json
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.helpers import SHOUT_GRAPH_PY
from tests.support.stacks import stack_in_mode
from waybill.common.launch import Stack

AUTH_PY = """
from langgraph_sdk import Auth

auth = Auth()


@auth.authenticate
async def authenticate(authorization: str | None):
    if authorization != "Bearer alice-token":
        raise Auth.exceptions.HTTPException(status_code=401, detail="Invalid token")
    return {"identity": "alice"}


@auth.on.threads.create_run
async def by_team(ctx: Auth.types.AuthContext, value: dict):
    # A run may go only to a thread of the team its own metadata names.
    return {"team": value["metadata"].get("team", "none")}


@auth.on
async def allow(ctx: Auth.types.AuthContext, value: dict):
    return None
"""


def write_project(root: Path) -> Path:
    (root / "auth.py").write_text(textwrap.dedent(AUTH_PY))
    (root / "echo.py").write_text(SHOUT_GRAPH_PY)
    manifest = root / "langgraph.json"
    config = {"graphs": {"echo": "./echo.py:graph"}, "auth": {"path": "./auth.py:auth"}}
    manifest.write_text(json.dumps(config))
    return manifest


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # The filters are per item in admission's intake, whatever the storage: SQLite.
    manifest = write_project(tmp_path_factory.mktemp("batch-auth-project"))
    data_dir = tmp_path_factory.mktemp("batch-auth")
    with stack_in_mode("sqlite", data_dir, WAYBILL_GRAPHS=str(manifest)) as running:
        yield running


@pytest.fixture
async def alice(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": "Bearer alice-token"}
    async with httpx.AsyncClient(base_url=stack.url, headers=headers, timeout=30) as client:
        yield client


async def team_thread(alice: httpx.AsyncClient, team: str) -> str:
    reply = await alice.post("/threads", json={"metadata": {"team": team}})
    assert reply.status_code == 200, reply.text
    return str(reply.json()["thread_id"])


def item(thread_id: str, team: str) -> dict[str, Any]:
    return {
        "thread_id": thread_id,
        "assistant_id": "echo",
        "input": {"text": team},
        "metadata": {"team": team},
    }


async def runs_of(alice: httpx.AsyncClient, thread_id: str) -> list[dict[str, Any]]:
    reply = await alice.get(f"/threads/{thread_id}/runs")
    assert reply.status_code == 200, reply.text
    runs: list[dict[str, Any]] = reply.json()
    return runs


async def test_each_item_is_admitted_under_its_own_filter(alice: httpx.AsyncClient) -> None:
    red, blue = await team_thread(alice, "red"), await team_thread(alice, "blue")
    reply = await alice.post("/runs/batch", json=[item(red, "red"), item(blue, "blue")])
    assert reply.status_code == 200, reply.text
    assert [run["thread_id"] for run in reply.json()] == [red, blue]
    assert [run["metadata"]["team"] for run in reply.json()] == ["red", "blue"]


async def test_an_item_its_own_filter_excludes_refuses_the_batch(
    alice: httpx.AsyncClient,
) -> None:
    red, blue = await team_thread(alice, "red"), await team_thread(alice, "blue")
    # The second item says red but names the blue thread: not found, nothing admitted.
    reply = await alice.post("/runs/batch", json=[item(red, "red"), item(blue, "red")])
    assert reply.status_code == 404, reply.text
    assert await runs_of(alice, red) == []
    assert await runs_of(alice, blue) == []
    # The first item's filter would exclude the second's thread just as well.
    reply = await alice.post("/runs/batch", json=[item(red, "blue"), item(blue, "blue")])
    assert reply.status_code == 404, reply.text
    assert await runs_of(alice, red) == []
