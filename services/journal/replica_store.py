"""The journal replicas' rows (`journal_replicas`): who is a live member, the Redis
incarnation each has settled for, and a heartbeat count that moves while it
lives. replicas.py says why; a member's id also fences its batch writes
(`JournalStore.write`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from waybill.common import codec
from waybill.services.journal.tables import journal_replicas


@dataclass(frozen=True)
class Member:
    replica_id: str
    incarnation: str | None
    beats: int


class ReplicaStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        is_postgres = engine.dialect.name == "postgresql"
        self.dialect_insert: Any = postgresql.insert if is_postgres else sqlite.insert

    async def join(self, replica_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                self.dialect_insert(journal_replicas)
                .values(replica_id=replica_id, incarnation=None, beats=0, joined_at=codec.now_utc())
                .on_conflict_do_nothing()
            )

    async def heartbeat(self, replica_id: str, incarnation: str | None) -> bool:
        """Count a beat and record the incarnation; False when the replica was evicted."""
        async with self.engine.begin() as conn:
            beat = await conn.execute(
                update(journal_replicas)
                .where(journal_replicas.c.replica_id == replica_id)
                .values(incarnation=incarnation, beats=journal_replicas.c.beats + 1)
            )
        return bool(beat.rowcount)

    async def members(self) -> list[Member]:
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(journal_replicas))).all()
        return [Member(row.replica_id, row.incarnation, row.beats) for row in rows]

    async def evict(self, replica_id: str, beats: int) -> bool:
        """Remove a replica whose heartbeat stopped at `beats`; False if it beat since."""
        async with self.engine.begin() as conn:
            gone = await conn.execute(
                delete(journal_replicas).where(
                    journal_replicas.c.replica_id == replica_id, journal_replicas.c.beats == beats
                )
            )
        return bool(gone.rowcount)

    async def leave(self, replica_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(journal_replicas).where(journal_replicas.c.replica_id == replica_id)
            )
