"""Persistence of assistants: the row an assistant is (a copy of the version it
points at) and every version it has had. Writes to one assistant are serialized:
a row lock on Postgres, one in-process lock on SQLite (one admission process)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import ColumnElement, Select, delete, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from waybill.common import codec
from waybill.common.errors import not_found
from waybill.services.admission.auth_filters import matches
from waybill.services.admission.json_filters import contains
from waybill.services.admission.rows import AssistantRow
from waybill.services.admission.tables import assistant_versions, assistants

SORTABLE = ("assistant_id", "graph_id", "name", "created_at", "updated_at")
# Sorted ignoring case, as LangGraph Platform sorts them.
SORTED_BY_TEXT = ("graph_id", "name")


@dataclass
class AssistantFilter:
    """Which assistants a search or count sees. Assistants of graphs this server
    does not serve are hidden, as LangGraph Platform hides them."""

    served_graphs: list[str]
    graph_id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    auth: dict[str, Any] | None = None  # the project's auth filter on metadata
    owner: str | None = None  # whose assistants are seen; None: everyone's (an admin)
    shared: list[str] = field(default_factory=list)  # seen by all: the system assistants


def _version(row: Row[Any]) -> AssistantRow:
    """An assistant as one of its version rows holds it."""
    return AssistantRow(
        assistant_id=row.assistant_id,
        graph_id=row.graph_id,
        name=row.name,
        description=row.description,
        config=row.config or {},
        context=row.context or {},
        metadata=row.metadata or {},
        version=row.version,
        created_at=row.created_at,
    )


def _assistant(row: Row[Any]) -> AssistantRow:
    """An assistant's own row: its version's columns, its last update and its owner."""
    return replace(_version(row), updated_at=row.updated_at, owner_id=row.owner_id)


def _content(record: AssistantRow) -> dict[str, Any]:
    """The columns an assistant row shares with its version rows."""
    return {
        "assistant_id": record.assistant_id,
        "graph_id": record.graph_id,
        "name": record.name,
        "description": record.description,
        "config": record.config,
        "context": record.context,
        "metadata": record.metadata,
        "version": record.version,
    }


def _assistant_values(record: AssistantRow) -> dict[str, Any]:
    return {
        **_content(record),
        "created_at": record.created_at,
        "updated_at": record.updated_at or record.created_at,
        "owner_id": record.owner_id,
    }


def _version_values(record: AssistantRow, created_at: Any) -> dict[str, Any]:
    return {**_content(record), "created_at": created_at}


class AssistantStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"
        self._sqlite_writer = asyncio.Lock()

    @asynccontextmanager
    async def _writing(self) -> AsyncIterator[AsyncConnection]:
        if self.is_postgres:
            async with self.engine.begin() as conn:
                yield conn
        else:
            async with self._sqlite_writer, self.engine.begin() as conn:
                yield conn

    async def _current(
        self, conn: AsyncConnection, assistant_id: str, lock: bool = False
    ) -> AssistantRow | None:
        query = select(assistants).where(assistants.c.assistant_id == assistant_id)
        if lock and self.is_postgres:
            query = query.with_for_update()
        row = (await conn.execute(query)).first()
        return _assistant(row) if row else None

    # ---- writes ------------------------------------------------------------------

    async def ensure(self, records: list[AssistantRow]) -> None:
        """Insert these assistants (at their one version), or bring an existing row's
        description up to date (a project's `langgraph.json` may have changed it, and
        LangGraph Platform syncs it too). Start-up uses it for the system assistants;
        replicas may race, harmlessly."""
        dialect_insert = postgresql.insert if self.is_postgres else sqlite.insert
        async with self._writing() as conn:
            for record in records:
                described = {"description": record.description}
                await conn.execute(
                    dialect_insert(assistants)
                    .values(**_assistant_values(record))
                    .on_conflict_do_update(index_elements=["assistant_id"], set_=described)
                )
                await conn.execute(
                    dialect_insert(assistant_versions)
                    .values(**_version_values(record, record.created_at))
                    .on_conflict_do_update(
                        index_elements=["assistant_id", "version"], set_=described
                    )
                )

    async def create(self, record: AssistantRow) -> AssistantRow | None:
        """Insert a new assistant at version 1; None: its id is taken."""
        try:
            async with self._writing() as conn:
                if await self._current(conn, record.assistant_id) is not None:
                    return None
                await conn.execute(insert(assistants).values(**_assistant_values(record)))
                await conn.execute(
                    insert(assistant_versions).values(**_version_values(record, record.created_at))
                )
                return record
        except IntegrityError:  # another replica inserted the same id first
            if await self.get(record.assistant_id) is None:
                raise
            return None

    async def revise(
        self, assistant_id: str, revision: Callable[[AssistantRow], AssistantRow]
    ) -> AssistantRow:
        """Store `revision(current)` as a new version (the highest so far + 1) and
        point the assistant at it. `revision` may refuse by raising."""
        async with self._writing() as conn:
            current = await self._current(conn, assistant_id, lock=True)
            if current is None:
                raise not_found(f"Assistant {assistant_id} not found.")
            revised = revision(current)
            newest = await conn.execute(
                select(func.max(assistant_versions.c.version)).where(
                    assistant_versions.c.assistant_id == assistant_id
                )
            )
            revised.version = int(newest.scalar() or 0) + 1
            revised.created_at, revised.updated_at = current.created_at, codec.now_utc()
            await conn.execute(
                insert(assistant_versions).values(**_version_values(revised, revised.updated_at))
            )
            await self._point_at(conn, revised)
        return revised

    async def set_latest(self, assistant_id: str, version: int) -> AssistantRow:
        """Point the assistant at one of its stored versions."""
        async with self._writing() as conn:
            current = await self._current(conn, assistant_id, lock=True)
            if current is None:
                raise not_found(f"Assistant {assistant_id} not found.")
            row = (
                await conn.execute(
                    select(assistant_versions).where(
                        assistant_versions.c.assistant_id == assistant_id,
                        assistant_versions.c.version == version,
                    )
                )
            ).first()
            if row is None:
                raise not_found(f"Version {version} not found for assistant {assistant_id}.")
            chosen = _version(row)
            chosen.created_at, chosen.updated_at = current.created_at, codec.now_utc()
            await self._point_at(conn, chosen)
        return chosen

    async def _point_at(self, conn: AsyncConnection, record: AssistantRow) -> None:
        await conn.execute(
            update(assistants)
            .where(assistants.c.assistant_id == record.assistant_id)
            .values(**_content(record), updated_at=record.updated_at)
        )

    async def delete(self, assistant_id: str) -> None:
        async with self._writing() as conn:
            await conn.execute(
                delete(assistant_versions).where(assistant_versions.c.assistant_id == assistant_id)
            )
            deleted = await conn.execute(
                delete(assistants).where(assistants.c.assistant_id == assistant_id)
            )
            if not deleted.rowcount:
                raise not_found(f"Assistant {assistant_id} not found.")

    # ---- reads -------------------------------------------------------------------

    async def get(self, assistant_id: str) -> AssistantRow | None:
        async with self.engine.connect() as conn:
            return await self._current(conn, assistant_id)

    async def passes(self, assistant_id: str, auth: dict[str, Any]) -> bool:
        """Whether the assistant's metadata passes the project's auth filter."""
        query = select(assistants.c.assistant_id).where(
            assistants.c.assistant_id == assistant_id,
            matches(assistants.c.metadata, auth, self.is_postgres),
        )
        async with self.engine.connect() as conn:
            return (await conn.execute(query)).first() is not None

    def _where(self, query: Select[Any], wanted: AssistantFilter) -> Select[Any]:
        query = query.where(
            assistants.c.graph_id.in_(wanted.served_graphs),
            contains(assistants.c.metadata, wanted.metadata, self.is_postgres),
            matches(assistants.c.metadata, wanted.auth, self.is_postgres),
        )
        if wanted.owner is not None:
            query = query.where(
                or_(
                    assistants.c.owner_id == wanted.owner,
                    assistants.c.assistant_id.in_(wanted.shared),
                )
            )
        if wanted.graph_id:
            query = query.where(assistants.c.graph_id == wanted.graph_id)
        if wanted.name:
            pattern = wanted.name.lower()
            query = query.where(func.lower(assistants.c.name).contains(pattern, autoescape=True))
        return query

    async def search(
        self, wanted: AssistantFilter, limit: int, offset: int, sort_by: str, sort_order: str
    ) -> tuple[list[AssistantRow], bool]:
        """One page of matching assistants, and whether more match past it."""
        column: ColumnElement[Any] = assistants.c[sort_by]
        if sort_by in SORTED_BY_TEXT:
            column = func.lower(column)
        order = [column, assistants.c.assistant_id]  # the id keeps pages stable
        query = self._where(select(assistants), wanted).order_by(
            *(c.asc() if sort_order == "asc" else c.desc() for c in order)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query.limit(limit + 1).offset(offset))).all()
        return [_assistant(row) for row in rows[:limit]], len(rows) > limit

    async def count(self, wanted: AssistantFilter) -> int:
        query = self._where(select(func.count()).select_from(assistants), wanted)
        async with self.engine.connect() as conn:
            return int((await conn.execute(query)).scalar() or 0)

    async def versions(
        self, assistant_id: str, metadata: dict[str, Any], limit: int, offset: int
    ) -> list[AssistantRow]:
        query = (
            select(assistant_versions)
            .where(
                assistant_versions.c.assistant_id == assistant_id,
                contains(assistant_versions.c.metadata, metadata, self.is_postgres),
            )
            .order_by(assistant_versions.c.version.desc())
            .limit(limit)
            .offset(offset)
        )
        async with self.engine.connect() as conn:
            return [_version(row) for row in (await conn.execute(query)).all()]
