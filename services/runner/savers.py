"""LangGraph's checkpoint savers, completed with the thread operations of LangGraph's
own interface that the installed packages leave to the base class (it raises
NotImplementedError): `adelete_for_runs` (a rollback removes what a run wrote),
`acopy_thread` (`POST /threads/{id}/copy`) and, on SQLite, `aprune`
(`POST /threads/prune` with `keep_latest`).

A package's own method is used whenever it has one (the day a release adds
them); until then these run on the saver's own connection and lock, against its
own tables, each in one transaction, as the package's own `adelete_thread`
does: the only code besides `fenced_writes.py` that knows those tables.

One exception: Postgres' own `aprune(strategy="keep_latest")` drops what the API
keeps (the kept checkpoint's parent link, a subgraph namespace's newest
checkpoint), so `keep_latest` is ours on both databases, the same rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

PRUNE_STRATEGIES = ("keep_latest", "delete")


def package_implements(saver: type[BaseCheckpointSaver[Any]], method: str) -> bool:
    """Whether the saver's package has `method` of its own (not the base class's)."""
    return getattr(saver, method) is not getattr(BaseCheckpointSaver, method)


# Every column of LangGraph's tables but thread_id: what a thread's copy copies.
CHECKPOINT_COLUMNS = (
    "checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata"
)
WRITE_COLUMNS = "checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type"


def _copy(table: str, columns: str, placeholder: str) -> str:
    return (
        f"INSERT INTO {table} (thread_id, {columns}) "
        f"SELECT {placeholder}, {columns} FROM {table} WHERE thread_id = {placeholder}"
    )


def _older_than_newest(table: str, placeholder: str) -> str:
    """Delete a thread's rows of `table` older than the newest checkpoint of their
    namespace (checkpoint ids sort by time, as LangGraph reads them)."""
    return (
        f"DELETE FROM {table} WHERE thread_id = {placeholder} AND checkpoint_id < ("
        "SELECT MAX(newest.checkpoint_id) FROM checkpoints newest "
        f"WHERE newest.thread_id = {table}.thread_id "
        f"AND newest.checkpoint_ns = {table}.checkpoint_ns)"
    )


def _check_prune(thread_ids: Sequence[str], strategy: str) -> list[str]:
    if isinstance(thread_ids, str):
        raise TypeError("thread_ids must be a sequence of thread ids, not a str")
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(f"unknown prune strategy: {strategy!r}")
    return [str(thread_id) for thread_id in thread_ids]


class PostgresSaver(AsyncPostgresSaver):
    """LangGraph's Postgres saver (channel values in `checkpoint_blobs`, by version)."""

    # A run's checkpoints are those whose metadata names it (the runner stamps each).
    DELETE_FOR_RUNS_SQL = (
        "DELETE FROM checkpoint_writes w USING checkpoints c "
        "WHERE c.metadata->>'run_id' = ANY(%s) AND w.thread_id = c.thread_id "
        "AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id",
        "DELETE FROM checkpoints WHERE metadata->>'run_id' = ANY(%s)",
    )
    # Channel values are kept apart, by version; a copy takes them all.
    COPY_THREAD_SQL = (
        _copy("checkpoints", CHECKPOINT_COLUMNS, "%s"),
        _copy("checkpoint_blobs", "checkpoint_ns, channel, version, type, blob", "%s"),
        _copy("checkpoint_writes", f"{WRITE_COLUMNS}, blob", "%s"),
    )

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the runs' checkpoints and their pending writes (channel values stay:
        other checkpoints may hold the same versions)."""
        if package_implements(AsyncPostgresSaver, "adelete_for_runs"):
            await super().adelete_for_runs(run_ids)
            return
        runs = [str(run_id) for run_id in run_ids]
        async with self._cursor() as cur, cur.connection.transaction():
            for sql in self.DELETE_FOR_RUNS_SQL:
                await cur.execute(sql, (runs,))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint of the thread, with its channel values and writes."""
        if package_implements(AsyncPostgresSaver, "acopy_thread"):
            await super().acopy_thread(source_thread_id, target_thread_id)
            return
        threads = (str(target_thread_id), str(source_thread_id))
        async with self._cursor() as cur, cur.connection.transaction():
            for sql in self.COPY_THREAD_SQL:
                await cur.execute(sql, threads)

    KEEP_LATEST_SQL = (
        _older_than_newest("checkpoint_writes", "%s"),
        _older_than_newest("checkpoints", "%s"),
        # Then the channel values no kept checkpoint names any more.
        "DELETE FROM checkpoint_blobs WHERE thread_id = %s AND NOT EXISTS ("
        "SELECT 1 FROM checkpoints kept WHERE kept.thread_id = checkpoint_blobs.thread_id "
        "AND kept.checkpoint_ns = checkpoint_blobs.checkpoint_ns "
        "AND kept.checkpoint -> 'channel_versions' ->> checkpoint_blobs.channel "
        "= checkpoint_blobs.version)",
    )

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`delete` is the package's own; `keep_latest` keeps the newest checkpoint of
        each namespace (a subgraph's too) as it is, parent link included."""
        threads = _check_prune(thread_ids, strategy)
        if strategy == "delete":
            await super().aprune(threads, strategy=strategy)
            return
        for thread_id in threads:
            async with self._cursor() as cur, cur.connection.transaction():
                for sql in self.KEEP_LATEST_SQL:
                    await cur.execute(sql, (thread_id,))


class SqliteSaver(AsyncSqliteSaver):
    """LangGraph's SQLite saver (its channel values are inside each checkpoint)."""

    RUN_OF_CHECKPOINT = "json_extract(CAST(metadata AS TEXT), '$.run_id')"
    COPY_THREAD_SQL = (
        _copy("checkpoints", CHECKPOINT_COLUMNS, "?"),
        _copy("writes", f"{WRITE_COLUMNS}, value", "?"),
    )
    KEEP_LATEST_SQL = (_older_than_newest("writes", "?"), _older_than_newest("checkpoints", "?"))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the runs' checkpoints and their pending writes."""
        if package_implements(AsyncSqliteSaver, "adelete_for_runs"):
            await super().adelete_for_runs(run_ids)
            return
        runs = [str(run_id) for run_id in run_ids]
        if not runs:
            return
        of_runs = f"{self.RUN_OF_CHECKPOINT} IN ({', '.join('?' for _ in runs)})"
        await self._in_one_transaction(
            (
                "DELETE FROM writes WHERE (thread_id, checkpoint_ns, checkpoint_id) IN ("
                f"SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints WHERE {of_runs})",
                runs,
            ),
            (f"DELETE FROM checkpoints WHERE {of_runs}", runs),
        )

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint of the thread, with its pending writes."""
        if package_implements(AsyncSqliteSaver, "acopy_thread"):
            await super().acopy_thread(source_thread_id, target_thread_id)
            return
        threads = (str(target_thread_id), str(source_thread_id))
        await self._in_one_transaction(*((sql, threads) for sql in self.COPY_THREAD_SQL))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: the newest checkpoint of each namespace and its writes stay;
        `delete`: the threads' checkpoints all go."""
        if package_implements(AsyncSqliteSaver, "aprune"):
            await super().aprune(thread_ids, strategy=strategy)
            return
        for thread_id in _check_prune(thread_ids, strategy):
            if strategy == "delete":
                await self.adelete_thread(thread_id)
            else:
                await self._in_one_transaction(
                    *((sql, (thread_id,)) for sql in self.KEEP_LATEST_SQL)
                )

    async def _in_one_transaction(self, *statements: tuple[str, Sequence[Any]]) -> None:
        await self.setup()
        async with self.lock:
            # An insert the fence trigger aborted can leave its transaction open.
            if self.conn.in_transaction:
                await self.conn.rollback()
            try:
                for sql, parameters in statements:
                    async with self.conn.execute(sql, parameters):
                        pass
            except BaseException:
                await self.conn.rollback()
                raise
            await self.conn.commit()
