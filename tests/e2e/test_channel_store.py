"""The channels' shared facts on a real database (SQLite file and Postgres):
inbound dedupe, conversation -> thread generations, and the long-polling
leader lease that makes one replica of the cluster poll."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.conftest import MODES
from tests.support.stacks import fresh_postgres_database
from waybill.common.sql import create_engine
from waybill.services.delivery.channels.store import HOLDER, ChannelStore, OwedReply, thread_id_of
from waybill.services.delivery.store import ReceiptStore


@pytest.fixture(scope="module", params=MODES)
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    if request.param == "postgres":
        with fresh_postgres_database() as url:
            yield url
    else:
        path: Path = tmp_path_factory.mktemp("channel-store") / "delivery.db"
        yield f"sqlite+aiosqlite:///{path}"


@pytest.fixture
async def stores(database_url: str) -> AsyncIterator[tuple[ChannelStore, ChannelStore]]:
    """Two replicas' stores: two engines on one database."""
    engines = [create_engine(database_url), create_engine(database_url)]
    await ReceiptStore(engines[0]).migrate()  # the delivery migrations, channels' included
    yield ChannelStore(engines[0]), ChannelStore(engines[1])
    for engine in engines:
        await engine.dispose()


async def test_an_event_is_taken_once_across_replicas(
    stores: tuple[ChannelStore, ChannelStore],
) -> None:
    one, two = stores
    taken = await asyncio.gather(*[store.take_event("tg", "777") for store in (one, two) * 4])
    assert sorted(taken) == [False] * 7 + [True]
    assert await one.take_event("other-channel", "777")  # ids are per channel
    await two.release_event("tg", "777")  # its handling failed: a retry is taken
    assert await one.take_event("tg", "777")
    assert await two.forget_events(3600) == 0  # kept while a platform may retry
    await asyncio.sleep(0.05)
    assert await two.forget_events(0.01) >= 2  # then forgotten
    assert await one.take_event("tg", "777")


async def test_new_moves_a_conversation_to_a_fresh_thread(
    stores: tuple[ChannelStore, ChannelStore],
) -> None:
    one, two = stores
    first = await one.thread_of("tg", "chat-9")
    assert first == thread_id_of("tg", "chat-9", 0) == await two.thread_of("tg", "chat-9")
    moved = await asyncio.gather(one.next_thread("tg", "chat-9"), two.next_thread("tg", "chat-9"))
    assert sorted(moved) == sorted([thread_id_of("tg", "chat-9", g) for g in (1, 2)])
    assert await one.thread_of("tg", "chat-9") == thread_id_of("tg", "chat-9", 2)
    assert await two.thread_of("tg", "chat-8") == thread_id_of("tg", "chat-8", 0)


async def test_one_leader_holds_the_listening_lease_and_its_position_survives(
    stores: tuple[ChannelStore, ChannelStore],
) -> None:
    one, two = stores
    lease = "listen:test"
    assert await one.hold_lease(lease, "replica-1", 0.5) == ""  # no position yet: from now
    assert await two.hold_lease(lease, "replica-2", 0.5) is None  # held by replica-1
    token = "s72595_4483_1934" + "x" * 300  # a Matrix since token can be long
    assert await one.advance_lease(lease, "replica-1", token)
    assert not await two.advance_lease(lease, "replica-2", "99")  # not its lease
    assert await one.hold_lease(lease, "replica-1", 0.5) == token  # renewed, position kept

    await asyncio.sleep(0.7)  # replica-1 stopped renewing: its lease expires
    assert await two.hold_lease(lease, "replica-2", 5) == token  # taken over where it stopped
    assert not await one.advance_lease(lease, "replica-1", "50")  # the old leader is fenced
    assert await one.hold_lease(lease, "replica-1", 5) is None

    await two.drop_lease(lease, "replica-2")  # a stopping leader lets go at once
    assert await one.hold_lease(lease, "replica-1", 5) == token


def test_telegram_polling_offsets_survive_the_move_to_text_positions(database_url: str) -> None:
    """Migration 0005: a Telegram long-polling lease keeps its offset, renamed to
    the listeners' lease, and goes back on downgrade."""
    from alembic import command
    from sqlalchemy import create_engine as create_sync_engine
    from sqlalchemy import text

    from waybill.common.sql import alembic_config
    from waybill.services.delivery.store import MIGRATIONS

    sync_url = database_url.replace("+aiosqlite", "").replace("+asyncpg", "+psycopg")
    engine = create_sync_engine(sync_url)

    def move(revision: str, down: bool = False) -> None:
        with engine.begin() as connection:
            config = alembic_config(MIGRATIONS, "delivery", connection)
            (command.downgrade if down else command.upgrade)(config, revision)

    try:
        move("head")  # whichever test ran before
        move("0004", down=True)
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM channel_leases"))
            conn.execute(
                text("INSERT INTO channel_leases VALUES ('telegram-poll:tg', 'r1', :at, 41)"),
                {"at": "2026-12-01 00:00:00+00:00"},
            )
        move("0005")
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT name, position FROM channel_leases")).all()
        assert [tuple(row) for row in rows] == [("listen:tg", "41")]
        move("0004", down=True)
        with engine.connect() as conn:
            names = conn.execute(text("SELECT name FROM channel_leases")).scalars().all()
        assert names == ["telegram-poll:tg"]
        move("head")
    finally:
        engine.dispose()


async def test_an_answer_streamed_here_is_not_adopted_here_when_its_lease_lapses(
    stores: tuple[ChannelStore, ChannelStore],
) -> None:
    """A renewal that came late (a loaded machine) let the lease of an answer this
    replica streams lapse: its own sweep adopted it and streamed it a second time
    (two answers in the chat). It skips what it streams; another replica still
    adopts a lapsed answer, as when the first died."""
    one, two = stores
    run_id = str(uuid.uuid4())
    owed = OwedReply(run_id, str(uuid.uuid4()), "tg", "{}", None)
    await one.owe_reply(owed, HOLDER, seconds=0.05)
    await asyncio.sleep(0.1)  # lapsed
    assert await one.adopt_replies(HOLDER, 30.0, skip={run_id}) == []
    (adopted,) = await two.adopt_replies("another-replica", 30.0)
    assert adopted.run_id == run_id
