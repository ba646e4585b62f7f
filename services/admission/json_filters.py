"""Metadata containment (`{"k": v}` matches a document holding k = v) on SQLite and Postgres."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, func, true, type_coerce
from sqlalchemy.dialects.postgresql import JSONB

from waybill.common import codec


def contains(column: Any, wanted: dict[str, Any], is_postgres: bool) -> ColumnElement[bool]:
    """A WHERE clause: the JSON document in `column` has every top-level pair of `wanted`."""
    if not wanted:
        return true()
    if is_postgres:
        return type_coerce(column, JSONB).contains(wanted)
    clauses = []
    for key, value in wanted.items():
        stored = func.json_extract(column, f'$."{key}"')
        if isinstance(value, dict | list):
            clauses.append(stored == func.json(codec.dumps(value).decode()))
        else:
            clauses.append(stored == value)
    return and_(*clauses)
