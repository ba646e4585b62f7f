"""The `tool_calls` table: a run's calls, started and finished, under the run's fence.

Every write names the epoch that makes it and is refused when the run's fence
(`run_fences`, moved by a takeover) names another one, in the same transaction
(on Postgres the fence row is share-locked first, so a takeover's move waits for
the write to commit; on SQLite the check is part of the one statement, under the
database's write lock). The primary key (run, call) makes a start a claim: of two
runners racing to start the same call, one inserts and the other finds the row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

# The fence names another epoch: this write would come from a runner that lost the run.
FENCED_OFF = "EXISTS (SELECT 1 FROM run_fences WHERE run_id = :run_id AND epoch <> :epoch)"
LOCK_FENCE = "SELECT epoch FROM run_fences WHERE run_id = :run_id FOR SHARE"


class CallStatus:
    STARTED = "started"
    FINISHED = "finished"


@dataclass(frozen=True)
class CallRecord:
    run_id: str
    call_id: str
    kind: str
    name: str
    status: str
    epoch: int
    attempts: int
    result_type: str | None
    result: bytes | None


@dataclass(frozen=True)
class CallKey:
    run_id: str
    thread_id: str
    call_id: str
    kind: str  # tool | model
    name: str


class ToolCallStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"

    async def _write_fenced(self, statement: str, params: dict[str, Any]) -> bool:
        """One write under the run's fence (locked first on Postgres, so that no fence
        moves under it); True when it changed a row."""
        async with self.engine.begin() as conn:
            if self.is_postgres:
                await conn.execute(text(LOCK_FENCE), {"run_id": params["run_id"]})
            done = await conn.execute(text(statement), params)
        return bool(done.rowcount)

    async def read(self, run_id: str, call_id: str) -> CallRecord | None:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT run_id, call_id, kind, name, status, epoch, attempts, "
                        "result_type, result FROM tool_calls "
                        "WHERE run_id = :run_id AND call_id = :call_id"
                    ),
                    {"run_id": run_id, "call_id": call_id},
                )
            ).first()
        return None if row is None else CallRecord(*row)

    async def start(self, key: CallKey, epoch: int) -> bool:
        """Claim the call for `epoch`: True when this insert made the row (False: the
        row exists already, or the fence names another epoch)."""
        return await self._write_fenced(
            "INSERT INTO tool_calls (run_id, call_id, thread_id, kind, name, status, "
            "epoch, attempts, started_at) SELECT CAST(:run_id AS VARCHAR), "
            "CAST(:call_id AS VARCHAR), CAST(:thread_id AS VARCHAR), "
            "CAST(:kind AS VARCHAR), CAST(:name AS VARCHAR), 'started', "
            f"CAST(:epoch AS BIGINT), 1, CAST(:now AS FLOAT) WHERE NOT {FENCED_OFF} "
            "ON CONFLICT (run_id, call_id) DO NOTHING",
            {**key.__dict__, "epoch": epoch, "now": time.time()},
        )

    async def put_finished(self, key: CallKey, epoch: int, result_type: str, result: bytes) -> bool:
        """Record a call that has nothing to claim before it (a model call's response)."""
        return await self._write_fenced(
            "INSERT INTO tool_calls (run_id, call_id, thread_id, kind, name, status, "
            "epoch, attempts, result_type, result, started_at, finished_at) SELECT "
            "CAST(:run_id AS VARCHAR), CAST(:call_id AS VARCHAR), "
            "CAST(:thread_id AS VARCHAR), CAST(:kind AS VARCHAR), "
            "CAST(:name AS VARCHAR), 'finished', CAST(:epoch AS BIGINT), 1, "
            "CAST(:result_type AS VARCHAR), :result, CAST(:now AS FLOAT), "
            f"CAST(:now AS FLOAT) WHERE NOT {FENCED_OFF} "
            "ON CONFLICT (run_id, call_id) DO NOTHING",
            {**key.__dict__, "epoch": epoch, "now": time.time()}
            | {"result_type": result_type, "result": result},
        )

    async def restart(self, run_id: str, call_id: str, epoch: int) -> bool:
        """Take over a call left started by an earlier epoch (an idempotent tool runs
        again). False when the fence names another epoch or the row changed."""
        return await self._write_fenced(
            "UPDATE tool_calls SET epoch = :epoch, attempts = attempts + 1, "
            "started_at = :now WHERE run_id = :run_id AND call_id = :call_id "
            f"AND status = 'started' AND epoch < :epoch AND NOT {FENCED_OFF}",
            {"run_id": run_id, "call_id": call_id, "epoch": epoch, "now": time.time()},
        )

    async def finish(
        self, run_id: str, call_id: str, epoch: int, result_type: str, result: bytes
    ) -> bool:
        """Record the call's result. False when `epoch` no longer holds the call."""
        return await self._write_fenced(
            "UPDATE tool_calls SET status = 'finished', result_type = :result_type, "
            "result = :result, finished_at = :now "
            "WHERE run_id = :run_id AND call_id = :call_id AND epoch = :epoch "
            f"AND NOT {FENCED_OFF}",
            {
                "run_id": run_id,
                "call_id": call_id,
                "epoch": epoch,
                "result_type": result_type,
                "result": result,
                "now": time.time(),
            },
        )

    async def forget_call(self, run_id: str, call_id: str, epoch: int) -> None:
        """A call that paused the graph (an interrupt) runs again when it resumes."""
        async with self.engine.begin() as conn:
            await conn.execute(
                text(
                    "DELETE FROM tool_calls WHERE run_id = :run_id AND call_id = :call_id "
                    "AND epoch = :epoch AND status = 'started'"
                ),
                {"run_id": run_id, "call_id": call_id, "epoch": epoch},
            )

    async def forget_run(self, run_id: str) -> None:
        """The run ended (or was rolled back): no later attempt will ask."""
        async with self.engine.begin() as conn:
            await conn.execute(text("DELETE FROM tool_calls WHERE run_id = :r"), {"r": run_id})

    async def forget_thread(self, thread_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                text("DELETE FROM tool_calls WHERE thread_id = :t"), {"t": thread_id}
            )

    async def calls_of(self, run_id: str) -> list[CallRecord]:
        """Every call the run recorded, for the end of a cancelled run and for tests."""
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    text(
                        "SELECT run_id, call_id, kind, name, status, epoch, attempts, "
                        "result_type, result FROM tool_calls WHERE run_id = :run_id"
                    ),
                    {"run_id": run_id},
                )
            ).all()
        return [CallRecord(*row) for row in rows]
