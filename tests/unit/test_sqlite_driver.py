"""The one-trip SQLite connection behaves as aiosqlite's own does, through SQLAlchemy
and used directly (as LangGraph's checkpointer uses it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from waybill.common import sqlite_driver
from waybill.common.sql import create_engine


async def test_statements_through_sqlalchemy(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'one.db'}")
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE)"))
            inserted = await conn.execute(text("INSERT INTO t (name) VALUES ('a')"))
            assert inserted.lastrowid == 1
            await conn.execute(text("INSERT INTO t (name) VALUES (:n)"), [{"n": "b"}, {"n": "c"}])
            updated = await conn.execute(text("UPDATE t SET name = name || '!' WHERE id > 1"))
            assert updated.rowcount == 2
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT id, name FROM t ORDER BY id"))).all()
            assert [tuple(row) for row in rows] == [(1, "a"), (2, "b!"), (3, "c!")]
        # A failed statement fails its transaction, which leaves nothing behind.
        with pytest.raises(IntegrityError):
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO t (name) VALUES ('d')"))
                await conn.execute(text("INSERT INTO t (name) VALUES ('a')"))
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar() == 3
    finally:
        await engine.dispose()


async def test_cursor_used_directly(tmp_path: Path) -> None:
    connection = sqlite_driver.connect(str(tmp_path / "two.db"))
    async with connection, connection.cursor() as cursor:
        await cursor.execute("CREATE TABLE t (n INTEGER)")
        await cursor.executemany("INSERT INTO t VALUES (?)", [(n,) for n in range(5)])
        assert cursor.rowcount == 5
        await connection.commit()
        await cursor.execute("SELECT n FROM t WHERE n > ? ORDER BY n", (2,))
        assert [d[0] for d in cursor.description] == ["n"]
        assert await cursor.fetchall() == [(3,), (4,)]
        assert await cursor.fetchall() == []  # read once, as a DB-API cursor


async def test_a_whole_transaction_in_one_trip(tmp_path: Path) -> None:
    def count_after_insert(connection: sqlite3.Connection, value: int) -> int:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("INSERT INTO t VALUES (?)", (value,))
        connection.commit()
        return int(connection.execute("SELECT count(*) FROM t").fetchone()[0])

    connection = sqlite_driver.connect_with_run(str(tmp_path / "three.db"))
    async with connection:
        await connection.execute("CREATE TABLE t (n INTEGER)")
        await connection.commit()
        assert await connection.run(count_after_insert, connection.sqlite_connection, 1) == 1
        assert await connection.run(count_after_insert, connection.sqlite_connection, 2) == 2
