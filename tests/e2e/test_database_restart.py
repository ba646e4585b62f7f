"""Every service comes back by itself after Postgres restarts (every connection
dropped) and after Redis restarts (its state lost): runs admitted, executed,
checkpointed, journaled, given receipts and streamed as before, with no service
restarted. On a Postgres cluster and a Redis of the test's own."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import grpc
import httpx
import pytest

from tests.support.helpers import says, slow
from tests.support.private_servers import (
    PrivatePostgres,
    PrivateRedis,
    private_postgres,
    private_redis,
)
from tests.support.stacks import eventually, running_stack, stack_env
from waybill.common.launch import Stack
from waybill.common.sql import database_unreachable

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[PrivatePostgres, PrivateRedis]]:
    with private_postgres() as postgres, private_redis() as redis_server:
        yield postgres, redis_server


@pytest.fixture(scope="module")
def stack(
    servers: tuple[PrivatePostgres, PrivateRedis], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    postgres, redis_server = servers
    database = postgres.create_database("restarts")
    data_dir = tmp_path_factory.mktemp("restarts")
    env = stack_env(
        data_dir,
        database,
        WAYBILL_REDIS_URL=redis_server.url,
        WAYBILL_JOURNAL_REDIS_PREFIX=f"test-{uuid.uuid4().hex[:8]}",
        WAYBILL_JOURNAL_POLL_SECONDS="0.1",
        WAYBILL_JOURNAL_REDIS_BLOCK_SECONDS="1",
        WAYBILL_JOURNAL_HEARTBEAT_SECONDS="0.3",
        WAYBILL_STARTUP_TIMEOUT_SECONDS="180",
    )
    with running_stack(env, data_dir) as running:
        yield running


async def run_to_the_end(http: httpx.AsyncClient, text: str) -> dict[str, object]:
    """A run streamed to its end (retried while the gateway answers 503), its status,
    and what the thread's state says afterwards."""

    async def attempt() -> dict[str, object] | None:
        thread = await http.post("/threads", json={})
        if thread.status_code == 503:
            return None
        thread_id = thread.json()["thread_id"]
        body = {"assistant_id": "lead_agent", "input": says(text), "stream_mode": ["values"]}
        reply = await http.post(f"/threads/{thread_id}/runs/wait", json=body)
        if reply.status_code == 503:
            return None
        run_id = reply.headers["Content-Location"].rsplit("/", 1)[-1]
        run = (await http.get(f"/threads/{thread_id}/runs/{run_id}")).json()
        stream = await http.get(f"/threads/{thread_id}/runs/{run_id}/stream")
        state = (await http.get(f"/threads/{thread_id}/state")).json()
        return {"status": run["status"], "stream": stream.status_code, "state": state}

    return dict(await eventually(attempt, f"a run of {text!r}", seconds=120))


async def test_a_postgres_restart_is_ridden_out_by_every_service(
    stack: Stack, servers: tuple[PrivatePostgres, PrivateRedis]
) -> None:
    postgres, _ = servers
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:
        before = await run_to_the_end(http, "/tokens 5")
        assert before["status"] == "success"
        await asyncio.to_thread(postgres.restart)
        after = await run_to_the_end(http, "/tokens 5")
        assert after["status"] == "success", after
        assert after["stream"] == 200
        assert len(after["state"]["values"]["messages"]) == 2  # type: ignore[index]
        # A run under way while it restarts: ends, whatever it ends as.
        thread_id = (await http.post("/threads", json={})).json()["thread_id"]
        body = {"assistant_id": "lead_agent", "input": slow(2)}
        run = (await http.post(f"/threads/{thread_id}/runs", json=body)).json()
        await asyncio.to_thread(postgres.restart)
        ended = await eventually(
            lambda: _terminal(http, thread_id, run["run_id"]), "the run to end", seconds=120
        )
        assert ended in ("success", "error", "interrupted"), ended
        assert (await run_to_the_end(http, "hi"))["status"] == "success"
    assert not stack.dead()


async def test_a_redis_restart_is_ridden_out_by_every_service(
    stack: Stack, servers: tuple[PrivatePostgres, PrivateRedis]
) -> None:
    _, redis_server = servers
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:
        assert (await run_to_the_end(http, "/tokens 5"))["status"] == "success"
        await asyncio.to_thread(redis_server.restart)
        after = await run_to_the_end(http, "/tokens 5")
        assert after["status"] == "success", after
        assert after["stream"] == 200
    assert not stack.dead()


async def _terminal(http: httpx.AsyncClient, thread_id: str, run_id: str) -> str | None:
    reply = await http.get(f"/threads/{thread_id}/runs/{run_id}")
    if reply.status_code != 200:
        return None
    status = str(reply.json()["status"])
    return None if status in ("pending", "running") else status


def test_a_dropped_database_connection_is_unavailable_not_internal() -> None:
    """What services answer while the database restarts: UNAVAILABLE (HTTP 503, retry)."""
    from sqlalchemy import exc

    refused = ConnectionRefusedError(111, "Connect call failed")
    assert database_unreachable(refused)
    wrapped = exc.OperationalError("SELECT 1", {}, refused)
    assert database_unreachable(wrapped)
    try:
        try:
            raise refused
        except ConnectionRefusedError as cause:
            raise RuntimeError("while dispatching") from cause
    except RuntimeError as chained:
        assert database_unreachable(chained)
    assert not database_unreachable(ValueError("a bug"))
    assert not database_unreachable(FileNotFoundError("workspace/x"))
    assert not database_unreachable(grpc.RpcError())
