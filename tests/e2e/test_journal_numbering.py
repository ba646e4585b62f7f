"""A run's numbering cannot fork: Redis loses its state while one journal replica
still holds events of the run not yet stored in SQL, then the run is taken over
through a third replica. The new attempt's numbers continue after every number
handed out (never from the SQL maximum), what a subscriber sees is each number
once, in order, and SQL stores each number once, with the event that had it.

Three journal processes on a Redis of the test's own (restarted or flushed here)
and a fresh Postgres database; the test is the runner (Append / Flush / Close)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.support.private_servers import PrivateRedis, private_redis
from tests.support.stacks import (
    aio_service_channel,
    free_port,
    fresh_postgres_database,
    replica_env,
    stack_env,
    wait_until,
)
from waybill.common.launch import Stack, grpc_serving
from waybill.services.journal.store import unpack
from waybill.v1 import journal_pb2, journal_pb2_grpc

pytestmark = pytest.mark.timeout(120)

JOURNAL = "waybill.services.journal.server"


@dataclass
class Journals:
    stack: Stack
    redis: PrivateRedis
    database_url: str
    addresses: dict[str, str]  # replica name -> gRPC address

    def kill(self, name: str) -> None:
        process = self.stack.processes[name]
        process.kill()
        process.wait()


@contextmanager
def three_journals(tmp_path: Path, **extra: str) -> Iterator[Journals]:
    """Replicas a, b, c; `a` lingers 30 s before its SQL writes, so the events it
    numbers stay in its memory (and Redis) only, until something hurries it."""
    with private_redis() as redis_server, fresh_postgres_database() as database_url:
        env = stack_env(
            tmp_path,
            database_url,
            WAYBILL_REDIS_URL=redis_server.url,
            WAYBILL_JOURNAL_REDIS_PREFIX=f"test-{uuid.uuid4().hex[:8]}",
            WAYBILL_JOURNAL_POLL_SECONDS="0.05",
            WAYBILL_JOURNAL_REDIS_BLOCK_SECONDS="1",
            WAYBILL_JOURNAL_HEARTBEAT_SECONDS="0.2",
            WAYBILL_JOURNAL_REPLICA_DEAD_SECONDS="2",
            **extra,
        )
        stack = Stack(env=env, log_dir=str(tmp_path))
        stack.migrate()
        addresses = {}
        try:
            for name, linger in (("a", "30"), ("b", "0.01"), ("c", "0.01")):
                address = f"127.0.0.1:{free_port()}"
                own = {
                    **replica_env("journal", address),
                    "WAYBILL_JOURNAL_WRITE_LINGER_SECONDS": linger,
                }
                stack.start_one(name, JOURNAL, own)
                addresses[name] = address
            for name, address in addresses.items():
                wait_until(lambda a=address: grpc_serving(a), f"journal {name} serving", 120)
            yield Journals(stack, redis_server, database_url, addresses)
        except BaseException:
            for log_file in sorted(tmp_path.glob("*.log")):
                print(f"---- {log_file.name} ----\n{log_file.read_text()[-3000:]}")
            raise
        finally:
            stack.stop()


@asynccontextmanager
async def stubs(journals: Journals) -> AsyncIterator[dict[str, journal_pb2_grpc.JournalStub]]:
    channels = {name: aio_service_channel(a) for name, a in journals.addresses.items()}
    try:
        yield {name: journal_pb2_grpc.JournalStub(c) for name, c in channels.items()}
    finally:
        for channel in channels.values():
            await channel.close()


def batch(*names: str) -> list[journal_pb2.RunEvent]:
    return [journal_pb2.RunEvent(event="custom", data=f'"{n}"'.encode()) for n in names]


async def append(
    stub: journal_pb2_grpc.JournalStub, run_id: str, epoch: int, names: list[str]
) -> int:
    request = journal_pb2.AppendRequest(run_id=run_id, epoch=epoch, events=batch(*names))
    return int((await stub.Append(request, timeout=30)).last_seq)


async def subscribe(
    stub: journal_pb2_grpc.JournalStub, run_id: str, seen: list[tuple[int, str]]
) -> None:
    """Every event the subscriber is sent, as (number, name), until the log's end."""
    async for item in stub.Subscribe(journal_pb2.SubscribeRequest(run_id=run_id, from_seq=0)):
        seen += [(event.seq, event.data.decode().strip('"')) for event in item.events]
        if item.end:
            return


def stored(database_url: str, run_id: str) -> dict[int, set[str]]:
    """Every number stored for the run, with each distinct event stored under it."""
    url = database_url.replace("postgresql+asyncpg://", "postgresql://")
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT frames FROM run_event_batches WHERE run_id = %s", (run_id,)
        ).fetchall()
    numbers: dict[int, set[str]] = {}
    for (frames,) in rows:
        for event in unpack(run_id, frames):
            numbers.setdefault(event.seq, set()).add(event.data.decode().strip('"'))
    return numbers


async def until(check, what: str, seconds: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("loss", ["restart", "flushall"])
async def test_a_takeover_after_redis_lost_unstored_events_numbers_after_them(
    tmp_path: Path, loss: str
) -> None:
    with three_journals(tmp_path) as journals:
        async with stubs(journals) as journal:
            run_id = str(uuid.uuid4())
            first = [f"a{i}" for i in range(10)]
            assert await append(journal["a"], run_id, 1, first) == 9
            await journal["a"].Flush(journal_pb2.FlushRequest(run_id=run_id), timeout=30)
            seen: list[tuple[int, str]] = []
            reader = asyncio.create_task(subscribe(journal["b"], run_id, seen))
            unstored = [f"a{i}" for i in range(10, 20)]
            assert await append(journal["a"], run_id, 1, unstored) == 19
            await until(lambda: len(seen) == 20, "the subscriber to see 0..19")
            # 10..19 are in a's memory (and Redis) only:
            assert sorted(stored(journals.database_url, run_id)) == list(range(10))

            if loss == "restart":
                await asyncio.to_thread(journals.redis.restart)
            else:
                await asyncio.to_thread(journals.redis.flush)

            # The old attempt's runner is gone; its takeover appends through c.
            takeover = [f"c{i}" for i in range(5)]
            assert await append(journal["c"], run_id, 2, takeover) == 24
            await journal["c"].Close(journal_pb2.CloseRequest(run_id=run_id, epoch=2), timeout=30)
            await asyncio.wait_for(reader, 30)
        numbers = stored(journals.database_url, run_id)

    expected = list(enumerate(first + unstored + takeover))
    assert seen == expected
    assert numbers == {seq: {name} for seq, name in expected}


async def test_a_dead_replica_does_not_hold_the_numbering_back(tmp_path: Path) -> None:
    """A replica killed (nothing pending) stops heartbeating: after the dead time the
    others number on without it."""
    with three_journals(tmp_path) as journals:
        async with stubs(journals) as journal:
            run_id = str(uuid.uuid4())
            assert await append(journal["b"], run_id, 1, ["b0", "b1"]) == 1
            await journal["b"].Flush(journal_pb2.FlushRequest(run_id=run_id), timeout=30)
            journals.kill("a")
            await asyncio.to_thread(journals.redis.restart)
            assert await append(journal["c"], run_id, 2, ["c0"]) == 2
            await journal["c"].Close(journal_pb2.CloseRequest(run_id=run_id, epoch=2), timeout=30)
        numbers = stored(journals.database_url, run_id)
    assert numbers == {0: {"b0"}, 1: {"b1"}, 2: {"c0"}}


async def test_a_log_closed_after_redis_lost_it_is_replayed_whole(tmp_path: Path) -> None:
    """The close comes after a Redis restart: Redis then holds the end marker and
    none of the events, and a replay through any replica still gets them all."""
    with three_journals(tmp_path) as journals:
        async with stubs(journals) as journal:
            run_id = str(uuid.uuid4())
            assert await append(journal["b"], run_id, 1, ["b0", "b1", "b2"]) == 2
            await journal["b"].Flush(journal_pb2.FlushRequest(run_id=run_id), timeout=30)
            await asyncio.to_thread(journals.redis.restart)
            await journal["c"].Close(journal_pb2.CloseRequest(run_id=run_id, epoch=1), timeout=30)
            for name in ("a", "b", "c"):
                seen: list[tuple[int, str]] = []
                await asyncio.wait_for(subscribe(journal[name], run_id, seen), 30)
                assert seen == [(0, "b0"), (1, "b1"), (2, "b2")], name
