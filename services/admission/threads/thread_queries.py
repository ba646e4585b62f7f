"""How threads are read: their live status, and the filters and orders of a search.

A thread's status is derived, as LangGraph Platform has it: `busy` while any of
its runs is pending or running, otherwise what its last run left behind (`idle`,
`interrupted` or `error`, stored on the row). So a queued or delayed run shows
the thread busy, and a thread is never left busy by a run that ended.

Containment (`metadata`, `values`) is Postgres' `@>` on JSONB there, and the same
rule computed by `json_contains` (registered as an SQL function) on SQLite.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    case,
    event,
    exists,
    func,
    type_coerce,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.elements import KeyedColumnElement

from waybill.common import codec
from waybill.common.statuses import ACTIVE_RUN_STATUSES, ThreadStatus
from waybill.services.admission.tables import runs, threads

THREAD_STATUSES: tuple[str, ...] = tuple(ThreadStatus)
SORT_KEYS = ("thread_id", "status", "created_at", "updated_at", "state_updated_at")
SORT_ORDERS = ("asc", "desc")
SQLITE_CONTAINS = "waybill_json_contains"


@dataclass
class ThreadQuery:
    """What a thread search or count filters on, and how a search is ordered."""

    metadata: dict[str, Any] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    status: str = ""
    ids: list[str] = field(default_factory=list)
    sort_by: str = "created_at"
    sort_order: str = "desc"


def has_active_run() -> ColumnElement[bool]:
    """Whether the thread has a run pending or running."""
    return exists().where(
        runs.c.thread_id == threads.c.thread_id, runs.c.status.in_(ACTIVE_RUN_STATUSES)
    )


def live_status() -> ColumnElement[Any]:
    """The thread's status as clients see it (see the module's docstring)."""
    return case((has_active_run(), ThreadStatus.BUSY.value), else_=threads.c.status)


def thread_columns() -> list[KeyedColumnElement[Any]]:
    """The thread row with its live status in place of the stored one."""
    stored = [column for column in threads.c if column.name != "status"]
    return [*stored, live_status().label("status")]


def filters(query: ThreadQuery, is_postgres: bool) -> list[ColumnElement[bool]]:
    clauses: list[ColumnElement[bool]] = []
    if query.status:
        clauses.append(live_status() == query.status)
    if query.ids:
        clauses.append(threads.c.thread_id.in_(query.ids))
    if query.metadata:
        clauses.append(contains_json(threads.c.metadata, query.metadata, is_postgres))
    if query.values:
        clauses.append(contains_json(threads.c["values"], query.values, is_postgres))
    return clauses


def sort_key(sort_by: str) -> ColumnElement[Any]:
    if sort_by == "status":
        return live_status()
    if sort_by == "state_updated_at":  # rows from before 0011 have none: their update
        return func.coalesce(threads.c.state_updated_at, threads.c.updated_at)
    return threads.c[sort_by]


def ordering(query: ThreadQuery) -> list[ColumnElement[Any]]:
    """The asked-for order, then thread_id, so that pages never overlap."""
    key = sort_key(query.sort_by)
    if query.sort_order == "asc":
        return [key.asc(), threads.c.thread_id.asc()]
    return [key.desc(), threads.c.thread_id.desc()]


def contains_json(
    column: ColumnElement[Any], pattern: dict[str, Any], is_postgres: bool
) -> ColumnElement[bool]:
    if is_postgres:
        return type_coerce(column, JSONB).contains(pattern)
    text = codec.dumps(pattern).decode()
    return func.waybill_json_contains(column, text, type_=Integer) == 1


def json_contains(document: Any, pattern: Any) -> bool:
    """Postgres' `@>`: an object contains the pairs of `pattern` (recursively),
    an array contains each element of `pattern` somewhere, a scalar equals."""
    if isinstance(pattern, dict):
        return isinstance(document, dict) and all(
            key in document and json_contains(document[key], value)
            for key, value in pattern.items()
        )
    if isinstance(pattern, list):
        return isinstance(document, list) and all(
            any(json_contains(item, wanted) for item in document) for wanted in pattern
        )
    return _same_scalar(document, pattern)


def _same_scalar(document: Any, pattern: Any) -> bool:
    # JSON keeps true apart from 1, and 1 equal to 1.0; Python does neither.
    if isinstance(document, bool) or isinstance(pattern, bool):
        return type(document) is type(pattern) and document == pattern
    numbers = (int, float)
    if isinstance(document, numbers) and isinstance(pattern, numbers):
        return document == pattern
    return type(document) is type(pattern) and document == pattern


def _sqlite_json_contains(document: str | None, pattern: str | None) -> int:
    if document is None or pattern is None:
        return 0  # SQL NULL (a thread without values yet) contains nothing
    try:
        return int(json_contains(json.loads(document), json.loads(pattern)))
    except ValueError:
        return 0


def install_sqlite_json_contains(engine: AsyncEngine) -> None:
    """Make `waybill_json_contains(document, pattern)` known to every SQLite connection."""

    @event.listens_for(engine.sync_engine, "connect")
    def _register(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.create_function(
            SQLITE_CONTAINS, 2, _sqlite_json_contains, deterministic=True
        )
