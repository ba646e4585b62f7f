"""The runner's own rows, kept beside LangGraph's checkpoints in the same database:
the fence that says which epoch may write a run's checkpoints, and each run's
tool calls (tool_call_store.py). (A rollback's
deletion, a thread's copy and prune are the checkpointer's own: savers.py.)"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from waybill.common.sql import migrate
from waybill.services.runner.effects.tool_call_store import ToolCallStore

MIGRATIONS = Path(__file__).parent.parent / "migrations"


class RunnerStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"
        self.tool_calls = ToolCallStore(engine)  # each run's calls (tool_calls.py)

    async def migrate(self) -> None:
        await migrate(self.engine, MIGRATIONS, "runner")

    async def advance_fence(self, run_id: str, epoch: int) -> None:
        """From now on only `epoch` may write this run's checkpoints."""
        async with self.engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO run_fences (run_id, epoch) VALUES (:run_id, :epoch) "
                    "ON CONFLICT (run_id) DO UPDATE SET epoch = excluded.epoch "
                    "WHERE run_fences.epoch < excluded.epoch"
                ),
                {"run_id": run_id, "epoch": epoch},
            )
