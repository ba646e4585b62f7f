"""Run streams resumable from any gateway and any journal replica, on Redis and
Postgres: every `Last-Event-ID`, a reconnect through another gateway, a Redis
restart mid-run, a slow consumer, and the retention sweep."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis

from tests.support.helpers import parse_sse
from tests.support.paths import FIXTURES
from tests.support.stacks import (
    SHARED_REDIS,
    aio_service_channel,
    drop_redis_keys,
    free_port,
    fresh_postgres_database,
    running_stack,
    service_channel,
    stack_env,
    start_second,
    start_second_gateway,
    wait_until,
)
from waybill.common import codec
from waybill.common.launch import Stack
from waybill.services.journal.store import unpack
from waybill.v1 import journal_pb2, journal_pb2_grpc

pytestmark = pytest.mark.timeout(120)

TICKER_GRAPHS = FIXTURES / "journal_graphs" / "langgraph.json"


@dataclass
class Replicas:
    """A stack whose runner appends through journal 1 (behind gateway A), with a
    journal 2 behind gateway B, both on one Redis and one Postgres."""

    stack: Stack
    gateway_b: str
    journal_b: str
    database_url: str
    redis_url: str
    prefix: str

    @property
    def gateway_a(self) -> str:
        return self.stack.url

    @property
    def journal_a(self) -> str:
        return self.stack.address_of("journal")


@contextmanager
def replicas_on(tmp_path: Path, redis_url: str, **extra: str) -> Iterator[Replicas]:
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    with fresh_postgres_database() as database_url:
        settings = {
            "WAYBILL_GRAPHS": str(TICKER_GRAPHS),
            "WAYBILL_REDIS_URL": redis_url,
            "WAYBILL_JOURNAL_REDIS_PREFIX": prefix,
            **extra,
        }
        env = stack_env(tmp_path, database_url, **settings)
        with running_stack(env, tmp_path) as stack:
            journal_b = start_second(stack, "journal")
            gateway_b = start_second_gateway(stack, WAYBILL_JOURNAL_ADDR=journal_b)
            try:
                yield Replicas(stack, gateway_b, journal_b, database_url, redis_url, prefix)
            finally:
                drop_redis_keys(redis_url, prefix)


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    """Shared by the tests below; live buffers of 8 events, so that overflows and
    catching up from the log happen all the time."""
    data_dir = tmp_path_factory.mktemp("replicas")
    with replicas_on(data_dir, SHARED_REDIS, WAYBILL_SUBSCRIBER_BUFFER="8") as found:
        yield found


def journal_stats(address: str) -> dict[str, int]:
    with service_channel(address) as channel:
        reply = journal_pb2_grpc.JournalStub(channel).GetStats(journal_pb2.JournalStatsRequest())
    return dict(codec.loads(reply.json))


def ticker(ticks: int, interval: float = 0.0, size: int = 0) -> dict[str, Any]:
    return {
        "assistant_id": "ticker",
        "input": {"ticks": ticks, "interval": interval, "size": size},
        "stream_mode": ["custom"],
    }


async def create_thread(http: httpx.AsyncClient) -> str:
    return str((await http.post("/threads", json={})).json()["thread_id"])


async def wait_done(http: httpx.AsyncClient, thread_id: str, run_id: str) -> dict[str, Any]:
    for _ in range(600):
        run = (await http.get(f"/threads/{thread_id}/runs/{run_id}")).json()
        if run["status"] not in ("pending", "running"):
            return dict(run)
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} did not finish")


async def sse_ids(lines: AsyncIterator[str]) -> AsyncIterator[int]:
    """The `id:` of each frame, as frames arrive."""
    async for line in lines:
        if line.startswith("id: "):
            yield int(line[4:])


def stored_seqs(database_url: str, run_id: str) -> list[int]:
    """Every number stored for the run, in order, once (batch rows may overlap)."""
    url = database_url.replace("postgresql+asyncpg://", "postgresql://")
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT frames FROM run_event_batches WHERE run_id = %s", (run_id,)
        ).fetchall()
    return sorted({event.seq for (frames,) in rows for event in unpack(run_id, frames)})


# ---- (1) every Last-Event-ID ------------------------------------------------------------


async def resumes_at_every_id(http: httpx.AsyncClient, thread_id: str, run_id: str) -> int:
    path = f"/threads/{thread_id}/runs/{run_id}/stream"
    everything = parse_sse((await http.get(path, headers={"Last-Event-ID": "-1"})).text)
    assert [int(frame["id"]) for frame in everything] == list(range(len(everything)))
    assert everything[0]["event"] == "metadata"
    for last in range(len(everything)):
        rest = parse_sse((await http.get(path, headers={"Last-Event-ID": str(last)})).text)
        assert rest == everything[last + 1 :], f"resumed after {last}"
    return len(everything)


async def test_every_last_event_id_resumes_exactly_the_rest(http: httpx.AsyncClient) -> None:
    """On the shared stack (memory fan-out; SQLite and Postgres)."""
    thread_id = await create_thread(http)
    body = {
        "assistant_id": "lead_agent",
        "input": {"messages": [{"role": "user", "content": "/tokens 12"}]},
        "stream_mode": ["messages-tuple"],
    }
    run = (await http.post(f"/threads/{thread_id}/runs", json=body)).json()
    await wait_done(http, thread_id, run["run_id"])
    assert await resumes_at_every_id(http, thread_id, run["run_id"]) > 12


async def test_every_last_event_id_through_the_other_journal_from_redis_then_sql(
    replicas: Replicas,
) -> None:
    async with (
        httpx.AsyncClient(base_url=replicas.gateway_a, timeout=30) as a,
        httpx.AsyncClient(base_url=replicas.gateway_b, timeout=30) as b,
    ):
        thread_id = await create_thread(a)
        run = (await a.post(f"/threads/{thread_id}/runs", json=ticker(25))).json()
        await wait_done(a, thread_id, run["run_id"])
        assert await resumes_at_every_id(b, thread_id, run["run_id"]) == 26
        # Without the Redis copy (expired, or lost), the SQL log answers the same.
        drop_redis_keys(replicas.redis_url, replicas.prefix)
        assert await resumes_at_every_id(b, thread_id, run["run_id"]) == 26
    assert stored_seqs(replicas.database_url, run["run_id"]) == list(range(26))


# ---- (2) reconnect through another gateway and journal ------------------------------


async def test_a_stream_resumed_through_another_gateway_sees_every_event_once(
    replicas: Replicas,
) -> None:
    ticks = 60
    async with (
        httpx.AsyncClient(base_url=replicas.gateway_a, timeout=30) as a,
        httpx.AsyncClient(base_url=replicas.gateway_b, timeout=30) as b,
    ):
        thread_id = await create_thread(a)
        appended_a = journal_stats(replicas.journal_a)["events_appended"]
        appended_b = journal_stats(replicas.journal_b)["events_appended"]
        seen: list[int] = []
        body = ticker(ticks, interval=0.03)
        async with a.stream("POST", f"/threads/{thread_id}/runs/stream", json=body) as first:
            run_id = first.headers["content-location"].rsplit("/", 1)[1]
            async for seq in sse_ids(first.aiter_lines()):
                seen.append(seq)
                if seq >= 20:
                    break  # the client drops the connection mid-run
        path = f"/threads/{thread_id}/runs/{run_id}/stream"
        headers = {"Last-Event-ID": str(seen[-1])}
        async with b.stream("GET", path, headers=headers) as second:
            assert second.status_code == 200
            seen += [seq async for seq in sse_ids(second.aiter_lines())]
        assert (await wait_done(a, thread_id, run_id))["status"] == "success"
    assert seen == list(range(ticks + 1))
    appended = journal_stats(replicas.journal_a)["events_appended"] - appended_a
    assert appended == ticks + 1  # the runner appends through journal 1 ...
    assert journal_stats(replicas.journal_b)["events_appended"] == appended_b  # 2 only reads


# ---- (3) Redis restarted mid-run -------------------------------------------------------


@contextmanager
def own_redis(port: int) -> Iterator[subprocess.Popen[bytes]]:
    process = start_redis(port)
    try:
        yield process
    finally:
        stop_redis(process)


def start_redis(port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    wait_until(lambda: _pings(client), f"redis on {port}")
    client.close()
    return process


def stop_redis(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
        process.wait()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


async def test_a_redis_restart_mid_run_loses_nothing(tmp_path: Path) -> None:
    port = free_port()
    ticks = 80
    with (
        own_redis(port) as first_redis,
        replicas_on(
            tmp_path,
            f"redis://127.0.0.1:{port}/0",
            WAYBILL_JOURNAL_POLL_SECONDS="0.05",
            WAYBILL_JOURNAL_REDIS_BLOCK_SECONDS="1",
        ) as replicas,
    ):
        async with (
            httpx.AsyncClient(base_url=replicas.gateway_a, timeout=60) as a,
            httpx.AsyncClient(base_url=replicas.gateway_b, timeout=60) as b,
        ):
            thread_id = await create_thread(a)
            run = (await a.post(f"/threads/{thread_id}/runs", json=ticker(ticks, 0.04))).json()
            path = f"/threads/{thread_id}/runs/{run['run_id']}/stream"
            seen: list[int] = []
            restarted: subprocess.Popen[bytes] | None = None
            async with b.stream("GET", path, headers={"Last-Event-ID": "-1"}) as stream:
                async for seq in sse_ids(stream.aiter_lines()):
                    seen.append(seq)
                    if seq == 15:
                        stop_redis(first_redis)  # everything Redis held is gone
                        await asyncio.sleep(1.0)
                        restarted = await asyncio.to_thread(start_redis, port)
            try:
                assert (await wait_done(a, thread_id, run["run_id"]))["status"] == "success"
            finally:
                if restarted is not None:
                    stop_redis(restarted)
        assert restarted is not None
        assert seen == list(range(ticks + 1))
        assert stored_seqs(replicas.database_url, run["run_id"]) == list(range(ticks + 1))
        appender, reader = journal_stats(replicas.journal_a), journal_stats(replicas.journal_b)
        assert appender["redis_seeds"] >= 2  # the run's start, and after the restart
        assert reader["redis_fallbacks"] >= 1  # the reader went on from SQL meanwhile


# ---- (4) a slow consumer ----------------------------------------------------------------


async def test_a_slow_consumer_overflows_is_counted_and_gets_every_event(
    replicas: Replicas,
) -> None:
    ticks = 300
    async with httpx.AsyncClient(base_url=replicas.gateway_a, timeout=60) as a:
        thread_id = await create_thread(a)
        before = journal_stats(replicas.journal_b)["subscriber_overflows"]
        run = (await a.post(f"/threads/{thread_id}/runs", json=ticker(ticks, size=40_000))).json()
        channel = aio_service_channel(replicas.journal_b)
        journal = journal_pb2_grpc.JournalStub(channel)
        call = journal.Subscribe(journal_pb2.SubscribeRequest(run_id=run["run_id"]))
        seqs = [event.seq for event in (await call.read()).events]
        # The consumer stalls while the whole run happens: the run is not slowed.
        assert (await wait_done(a, thread_id, run["run_id"]))["status"] == "success"
        while not (item := await call.read()).end:
            seqs += [event.seq for event in item.events]
        await channel.close()
    assert seqs == list(range(ticks + 1))
    assert journal_stats(replicas.journal_b)["subscriber_overflows"] > before


# ---- (5) retention -----------------------------------------------------------------------


@pytest.mark.parametrize("fan_out", ["memory", "redis"])
async def test_expired_events_are_swept_and_the_stream_says_so(
    tmp_path: Path, fan_out: str
) -> None:
    timers = {
        "WAYBILL_JOURNAL_RETENTION_SECONDS": "2",
        "WAYBILL_JOURNAL_SWEEP_SECONDS": "0.2",
        "WAYBILL_GRAPHS": str(TICKER_GRAPHS),
    }
    with retention_stack(tmp_path, fan_out, timers) as (url, database_url):
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            thread_id = await create_thread(http)
            # A run that lasts longer than the retention keeps its events while live.
            body = ticker(30, interval=0.1)
            async with http.stream("POST", f"/threads/{thread_id}/runs/stream", json=body) as live:
                run_id = live.headers["content-location"].rsplit("/", 1)[1]
                assert [seq async for seq in sse_ids(live.aiter_lines())] == list(range(31))
            path = f"/threads/{thread_id}/runs/{run_id}/stream"
            kept = await http.get(path, headers={"Last-Event-ID": "-1"})
            assert len(parse_sse(kept.text)) == 31  # ended just now: still kept
            gone = await poll_for_status(http, path, 410)
            assert gone.json()["detail"] == (
                f"Run {run_id}'s events expired: they are kept for 2 seconds after the run ends."
            )
            # The run itself is still there, and `join` still answers with its state.
            assert (await http.get(f"/threads/{thread_id}/runs/{run_id}")).status_code == 200
            joined = await http.get(f"/threads/{thread_id}/runs/{run_id}/join")
            assert joined.status_code == 200 and joined.json()["done"] == 30
        if database_url:
            assert stored_seqs(database_url, run_id) == []


async def poll_for_status(http: httpx.AsyncClient, path: str, status: int) -> httpx.Response:
    for _ in range(100):
        reply = await http.get(path, headers={"Last-Event-ID": "-1"})
        if reply.status_code == status:
            return reply
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} never answered {status}; last {reply.status_code}")


@contextmanager
def retention_stack(
    tmp_path: Path, fan_out: str, timers: dict[str, str]
) -> Iterator[tuple[str, str | None]]:
    if fan_out == "memory":  # the embedded default: SQLite, no Redis
        with running_stack(stack_env(tmp_path, **timers), tmp_path) as stack:
            yield stack.url, None
        return
    with replicas_on(tmp_path, SHARED_REDIS, **timers) as replicas:
        yield replicas.gateway_b, replicas.database_url
