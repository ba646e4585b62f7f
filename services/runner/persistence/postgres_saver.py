"""LangGraph's Postgres saver, completed as `savers.py` describes: apart from the
SQLite one, since its packages are the `postgres` extra (imported only when
WAYBILL_DATABASE_URL is a Postgres URL)."""

from __future__ import annotations

from collections.abc import Sequence

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from waybill.services.runner.persistence.savers import (
    CHECKPOINT_COLUMNS,
    WRITE_COLUMNS,
    _check_prune,
    _copy,
    _kept_for_deltas,
    _older_than_newest,
    package_implements,
)


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

    NOT_KEPT = "NOT (checkpoint_id = ANY(%s))"
    KEEP_LATEST_SQL = (
        _older_than_newest("checkpoint_writes", "%s", NOT_KEPT),
        _older_than_newest("checkpoints", "%s", NOT_KEPT),
    )
    # Then the channel values no kept checkpoint names any more.
    UNNAMED_BLOBS_SQL = (
        "DELETE FROM checkpoint_blobs WHERE thread_id = %s AND NOT EXISTS ("
        "SELECT 1 FROM checkpoints kept WHERE kept.thread_id = checkpoint_blobs.thread_id "
        "AND kept.checkpoint_ns = checkpoint_blobs.checkpoint_ns "
        "AND kept.checkpoint -> 'channel_versions' ->> checkpoint_blobs.channel "
        "= checkpoint_blobs.version)"
    )
    NAMESPACES_SQL = "SELECT DISTINCT checkpoint_ns FROM checkpoints WHERE thread_id = %s"

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`delete` is the package's own; `keep_latest` keeps the newest checkpoint of
        each namespace (a subgraph's too) as it is, parent link included."""
        threads = _check_prune(thread_ids, strategy)
        if strategy == "delete":
            await super().aprune(threads, strategy=strategy)
            return
        for thread_id in threads:
            async with self._cursor() as cur:
                await cur.execute(self.NAMESPACES_SQL, (thread_id,))
                namespaces = [row["checkpoint_ns"] for row in await cur.fetchall()]
            kept = await _kept_for_deltas(self, thread_id, namespaces)
            async with self._cursor() as cur, cur.connection.transaction():
                for sql in self.KEEP_LATEST_SQL:
                    await cur.execute(sql, (thread_id, kept))
                await cur.execute(self.UNNAMED_BLOBS_SQL, (thread_id,))
