"""What a careless graph costs is its own run, with a clear error: a state too
large to journal is refused (`StateTooLarge`) and its thread stays readable; a
graph factory that raises makes run creation a 400 naming the graph's error;
two epochs of one run on one runner keep their own workspace gates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client

from tests.support.helpers import poll_until_done
from tests.support.paths import FIXTURES
from tests.support.run_scopes import tool_config, tool_scope
from tests.support.stacks import running_stack, stack_env
from waybill.common.launch import Stack
from waybill.services.runner.agent import workspace

pytestmark = pytest.mark.timeout(90)

CARELESS_GRAPHS = FIXTURES / "reliability_graphs" / "langgraph.json"
MESSAGE_BYTES = 4 * 1024 * 1024  # small limits, so that "too large" is quick to reach


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("careless")
    env = stack_env(
        data_dir,
        WAYBILL_GRAPHS=str(CARELESS_GRAPHS),
        WAYBILL_GRPC_MAX_MESSAGE_BYTES=str(MESSAGE_BYTES),
        WAYBILL_MAX_REQUEST_BYTES=str(1024 * 1024),
        WAYBILL_UPLOAD_MAX_BYTES=str(1024 * 1024),
    )
    with running_stack(env, data_dir) as running:
        yield running


@pytest.mark.parametrize("stream_mode", ["values", "custom"])
async def test_a_state_too_large_is_refused_and_the_thread_stays_readable(
    stack: Stack, stream_mode: str
) -> None:
    client = get_client(url=stack.url)
    thread = await client.threads.create()
    first = await client.runs.wait(thread["thread_id"], "huge", input={"size": 10})
    assert first["done"] == "filled"

    run = await client.runs.create(
        thread["thread_id"],
        "huge",
        input={"size": MESSAGE_BYTES + 1},
        stream_mode=[stream_mode],
    )
    ended = await poll_until_done(client, thread["thread_id"], run["run_id"])
    assert ended["status"] == "error", ended
    receipt = await client.http.get(f"/threads/{thread['thread_id']}/runs/{run['run_id']}/receipt")
    assert receipt["error"]["error"] == "StateTooLarge"
    assert "bytes" in receipt["error"]["message"]

    # The thread reads as it was before the refused run, and takes runs again.
    state = await client.threads.get_state(thread["thread_id"])
    assert state["values"]["blob"] == "x" * 10
    again = await client.runs.wait(thread["thread_id"], "huge", input={"size": 20})
    assert again["blob"] == "x" * 20
    await client.aclose()


async def test_a_graph_factory_that_raises_is_a_400_naming_its_error(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as raw:
        thread = (await raw.post("/threads", json={})).json()
        for _ in range(2):  # the second time too (a failure is not cached as an answer)
            answer = await raw.post(
                f"/threads/{thread['thread_id']}/runs", json={"assistant_id": "broken"}
            )
            assert answer.status_code == 400, answer.text
            detail = answer.json()["detail"]
            assert "graph broken could not be built" in detail
            assert "RuntimeError: the graph's settings file is missing" in detail
            assert "StatusCode" not in detail and "debug_error_string" not in detail
        runs = (await raw.get(f"/threads/{thread['thread_id']}/runs")).json()
        assert runs == []  # nothing half-written


class Gate:
    def __init__(self) -> None:
        self.waited = 0

    def wait(self) -> None:
        self.waited += 1


def test_two_epochs_of_a_run_keep_their_own_snapshot_gates(tmp_path: Path) -> None:
    older, newer = Gate(), Gate()
    # Each epoch's execution installs its own scope; the older one winds down first.
    older_scope = tool_scope(tmp_path, run_id="run-1", epoch=1, gate=older)
    newer_scope = tool_scope(tmp_path, run_id="run-1", epoch=2, gate=newer)
    workspace.wait_for_snapshot(tool_config(newer_scope))  # type: ignore[arg-type]
    assert older_scope.snapshot_gate is older
    assert (older.waited, newer.waited) == (0, 1)
