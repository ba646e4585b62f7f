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

`keep_latest` also keeps what the newest checkpoint's `DeltaChannel`s are read
from (LangGraph 1.2): such a channel's value is stored only every
`snapshot_frequency` updates; in between, a checkpoint holds none, and reading it
replays the writes of its ancestors back to the nearest one that holds the value
(`get_delta_channel_history`). Those ancestors and their writes stay.

The Postgres saver is in `postgres_saver.py`: the `postgres` extra's packages,
imported only when WAYBILL_DATABASE_URL is a Postgres URL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
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


def _older_than_newest(table: str, placeholder: str, not_kept: str) -> str:
    """Delete a thread's rows of `table` older than the newest checkpoint of their
    namespace (checkpoint ids sort by time, as LangGraph reads them) whose
    `checkpoint_id` meets `not_kept` (the ancestors a delta channel needs fail it)."""
    return (
        f"DELETE FROM {table} WHERE thread_id = {placeholder} AND checkpoint_id < ("
        "SELECT MAX(newest.checkpoint_id) FROM checkpoints newest "
        f"WHERE newest.thread_id = {table}.thread_id "
        f"AND newest.checkpoint_ns = {table}.checkpoint_ns) AND {not_kept}"
    )


async def _delta_ancestors(saver: BaseCheckpointSaver[Any], newest: CheckpointTuple) -> list[str]:
    """The ancestors (ids) a read of `newest` replays its delta channels from: back
    to the nearest that holds each one's value, as `get_delta_channel_history` walks.
    The delta channels are those the checkpoint counts updates of since a snapshot."""
    counted = newest.metadata.get("counters_since_delta_snapshot") or {}
    checkpoint = newest.checkpoint
    missing = {
        channel
        for channel in counted
        if channel in checkpoint["channel_versions"] and channel not in checkpoint["channel_values"]
    }
    ancestors: list[str] = []
    parent = newest.parent_config
    while missing and parent is not None:
        found = await saver.aget_tuple(parent)
        if found is None:
            break
        ancestors.append(found.checkpoint["id"])
        missing -= set(found.checkpoint["channel_values"])
        parent = found.parent_config
    return ancestors


async def _kept_for_deltas(
    saver: BaseCheckpointSaver[Any], thread_id: str, namespaces: Sequence[str]
) -> list[str]:
    """Every ancestor the newest checkpoint of each namespace needs for its deltas."""
    kept: list[str] = []
    for namespace in namespaces:
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": namespace}}
        newest = await saver.aget_tuple(config)  # type: ignore[arg-type]
        if newest is not None:
            kept.extend(await _delta_ancestors(saver, newest))
    return kept


def _check_prune(thread_ids: Sequence[str], strategy: str) -> list[str]:
    if isinstance(thread_ids, str):
        raise TypeError("thread_ids must be a sequence of thread ids, not a str")
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(f"unknown prune strategy: {strategy!r}")
    return [str(thread_id) for thread_id in thread_ids]


class SqliteSaver(AsyncSqliteSaver):
    """LangGraph's SQLite saver (its channel values are inside each checkpoint)."""

    RUN_OF_CHECKPOINT = "json_extract(CAST(metadata AS TEXT), '$.run_id')"
    COPY_THREAD_SQL = (
        _copy("checkpoints", CHECKPOINT_COLUMNS, "?"),
        _copy("writes", f"{WRITE_COLUMNS}, value", "?"),
    )
    NOT_KEPT = "checkpoint_id NOT IN (SELECT value FROM json_each(?))"
    KEEP_LATEST_SQL = (
        _older_than_newest("writes", "?", NOT_KEPT),
        _older_than_newest("checkpoints", "?", NOT_KEPT),
    )
    NAMESPACES_SQL = "SELECT DISTINCT checkpoint_ns FROM checkpoints WHERE thread_id = ?"

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
                await self.setup()
                async with self.lock, self.conn.execute(self.NAMESPACES_SQL, (thread_id,)) as cur:
                    namespaces = [row[0] for row in await cur.fetchall()]
                kept = json.dumps(await _kept_for_deltas(self, thread_id, namespaces))
                await self._in_one_transaction(
                    *((sql, (thread_id, kept)) for sql in self.KEEP_LATEST_SQL)
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
