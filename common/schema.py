"""Which schema revision a service's tables are at, and whether this build may
run on them.

Migrations run once per deploy (`waybill migrate`, `python -m waybill.common.migrate`);
a service only checks at start that its tables are at the head revision it
knows, and refuses to start otherwise: behind means "run the migrations", an
unknown revision means the database was migrated by a newer build.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from waybill.common.sql import alembic_config, migrate, version_table

MIGRATE_HINT = "run the migrations first (`waybill migrate` or `python -m waybill.common.migrate`)"


class SchemaMismatch(Exception):
    """The database is not at the schema this build runs on; the message says why."""


@dataclass(frozen=True)
class Schema:
    """One service's Alembic migrations and its own version table."""

    service: str
    migrations: Path

    @property
    def version_table(self) -> str:
        return version_table(self.service)

    def script_directory(self) -> ScriptDirectory:
        return ScriptDirectory.from_config(alembic_config(self.migrations, self.service))

    def head(self) -> str:
        head = self.script_directory().get_current_head()
        assert head is not None, f"{self.migrations} has no revisions"
        return head

    def known(self) -> set[str]:
        return {script.revision for script in self.script_directory().walk_revisions()}

    async def upgrade(self, engine: AsyncEngine) -> None:
        """Bring the tables to this build's head; refuse tables a newer release
        migrated (this build cannot know what its revision did)."""
        current = await self.current(engine)
        if current is not None and current not in self.known():
            raise SchemaMismatch(str(self.verdict(current)))
        await migrate(engine, self.migrations, self.service)

    async def upgrade_to_head(self, engine: AsyncEngine) -> str:
        """Bring the tables to this build's head, close `engine`; return the head."""
        try:
            await self.upgrade(engine)
        finally:
            await engine.dispose()
        return self.head()

    async def current(self, engine: AsyncEngine) -> str | None:
        """The revision the database is at (None: never migrated)."""

        def read(connection: Connection) -> str | None:
            context = MigrationContext.configure(
                connection, opts={"version_table": self.version_table}
            )
            return context.get_current_revision()

        async with engine.connect() as connection:
            return await connection.run_sync(read)

    async def check(self, engine: AsyncEngine) -> None:
        """Raise `SchemaMismatch` unless the tables are at this build's head."""
        verdict = self.verdict(await self.current(engine))
        if verdict is not None:
            raise SchemaMismatch(verdict)

    def verdict(self, current: str | None) -> str | None:
        """What is wrong with `current` for this build, or None when it is the head."""
        head = self.head()
        if current == head:
            return None
        if current is None:
            return f"the {self.service} schema is not migrated (this build needs {head}): " + (
                MIGRATE_HINT
            )
        if current in self.known():
            return (
                f"the {self.service} schema is at {current}, this build needs {head}: "
                + MIGRATE_HINT
            )
        return (
            f"this build does not know {self.service} schema {current} (its newest is {head}): "
            "the database was migrated by a newer release; deploy that release or a newer one"
        )
