"""A sync node that never returns holds its thread after its run timed out.
The threads lent to sync nodes are bounded (`WAYBILL_RUNNER_NODE_THREADS`) and
counted; once every one is held by a run that ended, a new run is refused with
`NodeThreadsExhausted` instead of waiting for a thread forever."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from langgraph_sdk import get_client

from tests.support.helpers import poll_until_done
from tests.support.paths import FIXTURES
from tests.support.stacks import runner_stats, running_stack, stack_env, wait_until
from waybill.common.launch import Stack

pytestmark = pytest.mark.timeout(90)

CARELESS_GRAPHS = FIXTURES / "reliability_graphs" / "langgraph.json"
NODE_THREADS = 2


@pytest.fixture
def release_file(tmp_path: Path) -> Iterator[Path]:
    """The stuck nodes return once this file exists: at the latest, at teardown."""
    release = tmp_path / "release-the-stuck-nodes"
    yield release
    release.touch()


@pytest.fixture
def stack(tmp_path: Path, release_file: Path) -> Iterator[Stack]:
    (tmp_path / "stack").mkdir()
    env = stack_env(
        tmp_path / "stack",
        WAYBILL_GRAPHS=str(CARELESS_GRAPHS),
        WAYBILL_RUNNER_NODE_THREADS=str(NODE_THREADS),
        WAYBILL_RUN_TIMEOUT_SECONDS="1",
    )
    with running_stack(env, tmp_path / "stack") as running:
        yield running
        release_file.touch()  # before the stack stops: its threads end


async def test_stuck_sync_nodes_are_counted_and_exhaustion_refuses_new_runs(
    stack: Stack, release_file: Path
) -> None:
    client = get_client(url=stack.url)
    stuck_input = {"release_file": str(release_file)}
    for _ in range(NODE_THREADS):
        thread = await client.threads.create()
        run = await client.runs.create(thread["thread_id"], "stuck", input=stuck_input)
        ended = await poll_until_done(client, thread["thread_id"], run["run_id"])
        assert ended["status"] == "timeout", ended
    stats = runner_stats(stack.address_of("runner"))
    assert stats["node_threads"] == NODE_THREADS
    assert stats["node_threads_stuck"] == NODE_THREADS

    thread = await client.threads.create()
    refused = await client.runs.create(thread["thread_id"], "stuck", input=stuck_input)
    ended = await poll_until_done(client, thread["thread_id"], refused["run_id"])
    assert ended["status"] == "error", ended
    receipt = await client.http.get(
        f"/threads/{thread['thread_id']}/runs/{refused['run_id']}/receipt"
    )
    assert receipt["error"]["error"] == "NodeThreadsExhausted"
    assert "node threads" in receipt["error"]["message"]

    # The nodes return at last: their threads are free, and runs are served again.
    release_file.touch()  # noqa: ASYNC240
    wait_until(
        lambda: runner_stats(stack.address_of("runner"))["node_threads_stuck"] == 0,
        "the stuck threads freed",
        seconds=10,
    )
    thread = await client.threads.create()
    served = await client.runs.wait(thread["thread_id"], "stuck", input=stuck_input)
    assert served["done"] == "released"
    await client.aclose()
