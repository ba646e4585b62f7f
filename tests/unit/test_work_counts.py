"""common/work_counts.py: what a process sends to SQLite is counted, by file."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from waybill.common.sql import create_engine
from waybill.common.work_counts import COUNTS


async def test_statements_and_commits_to_a_sqlite_file_are_counted(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'counted.db'}")
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (a INTEGER)"))
        before = COUNTS.read()
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO t VALUES (1)"))
            await conn.execute(text("INSERT INTO t VALUES (2)"))
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar() == 2
    finally:
        await engine.dispose()
    after = COUNTS.read()

    def moved(kind: str) -> int:
        return after[kind].get("counted.db", 0) - before[kind].get("counted.db", 0)

    # BEGIN, two INSERTs, COMMIT; then the SELECT (and its own BEGIN and end, if any).
    assert moved("sql_commits") == 1
    assert moved("sql_statements") >= 5
