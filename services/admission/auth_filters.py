"""The project's auth filters (`@auth.on` handlers' return values) as SQL.

A filter is matched against a resource's `metadata`, as LangGraph Platform does:
`{"k": v}` and `{"k": {"$eq": v}}` — the metadata holds k = v; `{"k": {"$contains":
x}}` — k is a list holding x (each of x, if x is a list); `$or` / `$and` — lists of
filters. Each test is JSON containment (`@>` on Postgres, `waybill_json_contains` on
SQLite), so one rule holds on both databases.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, false, or_, select, true

from waybill.services.admission.tables import runs, threads
from waybill.services.admission.threads.thread_queries import contains_json


def matches(column: Any, found: dict[str, Any] | None, is_postgres: bool) -> ColumnElement[bool]:
    """A WHERE clause: the JSON document in `column` passes the filter `found`."""
    if not found:
        return true()
    clauses = [_one(column, key, value, is_postgres) for key, value in found.items()]
    return and_(*clauses)


def _one(column: Any, key: str, value: Any, is_postgres: bool) -> ColumnElement[bool]:
    if key == "$or":
        return or_(false(), *(matches(column, group, is_postgres) for group in value))
    if key == "$and":
        return and_(*(matches(column, group, is_postgres) for group in value))
    if isinstance(value, dict):
        operator, operand = next(iter(value.items()))
        if operator == "$contains":
            wanted = operand if isinstance(operand, list) else [operand]
            return contains_json(column, {key: wanted}, is_postgres)
        value = operand  # $eq (the gateway lets no other operator through)
    return contains_json(column, {key: value}, is_postgres)


def visible_threads(found: dict[str, Any] | None, is_postgres: bool) -> ColumnElement[bool]:
    """Threads whose metadata passes the filter."""
    return matches(threads.c.metadata, found, is_postgres)


def visible_runs(found: dict[str, Any] | None, is_postgres: bool) -> ColumnElement[bool]:
    """Runs are seen through their thread, as on LangGraph Platform."""
    if not found:
        return true()
    passing = select(threads.c.thread_id).where(visible_threads(found, is_postgres))
    return runs.c.thread_id.in_(passing)
