"""aiosqlite connections whose statements take one trip to the connection's thread.

aiosqlite runs every call on a worker thread, and SQLAlchemy's adapter makes
four calls per SELECT (open a cursor, execute, fetch the rows, close it) and
three per write: four thread hand-offs and event-loop wake-ups for one
statement, which cost more than SQLite spends running it. `OneTripCursor`
does all of them in one call, so a statement is one hand-off; the
connection, its thread and its transactions are aiosqlite's own.

Used by `common.sql.create_engine` for every SQLite engine (the embedded mode).
LangGraph's SQLite checkpointer keeps aiosqlite's cursors (it streams rows from
them), on a `SqliteConnection` whose `run` lets the runner's fenced writes
(services/runner/persistence/fenced_writes.py) do their whole transaction in one trip.

Trips matter most while a model streams: the event loop's thread then holds the
GIL, and the connection's thread gets it back only every switch interval (5 ms),
so each trip of a write started before the stream waits until it ends.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import aiosqlite

from waybill.common.work_counts import trace_sqlite


class OneTripCursor:
    """The DB-API cursor SQLAlchemy's aiosqlite adapter expects, run in one trip:
    the rows are read before the statement's answer comes back."""

    arraysize = 1

    def __init__(self, connection: OneTripConnection) -> None:
        self._connection = connection
        self.description: Any = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self._rows: list[Any] = []

    async def __aenter__(self) -> OneTripCursor:
        return self  # nothing to open: the SQLite cursor lives inside one trip

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    async def execute(self, operation: str, parameters: Any = None) -> OneTripCursor:
        await self._connection.run(self._run, operation, parameters, False)
        return self

    async def executemany(self, operation: str, parameters: Any) -> OneTripCursor:
        await self._connection.run(self._run, operation, parameters, True)
        return self

    async def fetchall(self) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows

    async def close(self) -> None:
        return None  # closed in its trip

    def _run(self, operation: str, parameters: Any, many: bool) -> None:
        """On the connection's thread: execute, keep the results, close."""
        cursor = self._connection.sqlite_connection.cursor()
        try:
            if many:
                cursor.executemany(operation, parameters)
            elif parameters is None:
                cursor.execute(operation)
            else:
                cursor.execute(operation, parameters)
            self.description = cursor.description
            self.rowcount = cursor.rowcount
            self.lastrowid = cursor.lastrowid
            self._rows = cursor.fetchall() if cursor.description else []
        finally:
            cursor.close()


class SqliteConnection(aiosqlite.Connection):
    """aiosqlite's connection, and `run`: a function on its thread, in one trip
    (several statements, a whole transaction, for one hand-off)."""

    @property
    def sqlite_connection(self) -> sqlite3.Connection:
        return self._conn

    async def run(self, function: Any, *args: Any) -> Any:
        return await self._execute(function, *args)


class OneTripConnection(SqliteConnection):
    def cursor(self) -> OneTripCursor:  # type: ignore[override]
        return OneTripCursor(self)


def connect(database: str, *, iter_chunk_size: int = 64, **kwargs: Any) -> OneTripConnection:
    """What `aiosqlite.connect` does, with the one-trip cursor (SQLAlchemy's
    `async_creator_fn` hook passes the same arguments)."""
    connection = OneTripConnection(_connector(database, kwargs), iter_chunk_size)
    connection._thread.daemon = True  # as SQLAlchemy does for aiosqlite's own
    return connection


def connect_with_run(database: str, **kwargs: Any) -> SqliteConnection:
    """aiosqlite's connection as it is (its cursors stream rows, which LangGraph's
    checkpointer relies on), with `run` for code of our own."""
    return SqliteConnection(_connector(database, kwargs), 64)


def _connector(database: str, kwargs: dict[str, Any]) -> Any:
    def connector() -> sqlite3.Connection:
        connection = sqlite3.connect(database, **kwargs)
        trace_sqlite(connection, database)
        return connection

    return connector
