"""A run's right to write, and the checkpointer that respects it.

A runner holds a run while its lease is fresh. `RunFence.check()` is called
before every durable write (journal, receipt, status, checkpoints); once the
lease is lost or its deadline passed, it refuses, so a runner that was paused
or cut off writes nothing after another runner took the run over. Checkpoint
writes also compare the epoch with the run's fence row, in the same transaction
(a trigger for checkpoints, `fenced_writes.py` for pending writes).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from waybill.services.runner.persistence.fenced_writes import put_writes_fenced
from waybill.services.runner.persistence.runner_store import RunnerStore
from waybill.services.runner.stats import STATS

STALE_EPOCH_MARK = "waybill: stale epoch"  # raised by the fence trigger (migration 0002)


class StaleEpochError(RuntimeError):
    """This runner no longer holds the run: it must write nothing more."""


class RunFence:
    def __init__(self, run_id: str, epoch: int, lease_seconds: float) -> None:
        self.run_id = run_id
        self.epoch = epoch
        # Admission starts the lease when it claims; we learn of it a moment
        # later, so keep a margin and stop writing before admission gives up.
        self.margin = min(0.2 * lease_seconds, 2.0)
        self.deadline = time.monotonic() + lease_seconds - self.margin
        self.lost = False

    def extend(self, renewal_sent_at: float, lease_seconds: float) -> None:
        self.deadline = max(self.deadline, renewal_sent_at + lease_seconds - self.margin)

    def lose(self) -> None:
        self.lost = True

    @property
    def held(self) -> bool:
        return not self.lost and time.monotonic() < self.deadline

    def check(self, what: str) -> None:
        if not self.held:
            raise self.refuse(f"epoch {self.epoch} lost its lease; refused {what}")

    def refuse(self, reason: str) -> StaleEpochError:
        """Count a refused write and give the error to raise; nothing more is written."""
        self.lost = True
        STATS.stale_writes_refused += 1
        return StaleEpochError(f"run {self.run_id}: {reason}")


class FencedCheckpointer(BaseCheckpointSaver[Any]):
    """Delegates to the real checkpointer, refusing writes from a stale epoch."""

    def __init__(self, inner: BaseCheckpointSaver[Any], fence: RunFence, store: RunnerStore):
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.fence = fence
        self.store = store
        # The thread's latest checkpoint as the run's graph first read it: the
        # state the run found (no extra read for who ran before it).
        self.found: CheckpointTuple | None = None
        self.found_read = False
        # Writes under way (a graph may save in the background), and whether the
        # run's writes are over: a rollback deletes what it wrote once none remain.
        self._writing = 0
        self._settled = asyncio.Event()
        self._settled.set()
        self.closed = False

    async def close(self) -> None:
        """Refuse the run's further writes and wait for those under way, so that what
        is deleted after this stays deleted."""
        self.closed = True
        await self._settled.wait()

    @contextlib.contextmanager
    def _writing_one(self) -> Iterator[None]:
        if self.closed:
            raise StaleEpochError(f"run {self.fence.run_id}: its writes are closed")
        self._writing += 1
        self._settled.clear()
        try:
            yield
        finally:
            self._writing -= 1
            if not self._writing:
                self._settled.set()

    def _refuse(self, reason: str) -> StaleEpochError:
        STATS.stale_checkpoint_writes_refused += 1
        return self.fence.refuse(reason)

    def _check_lease(self) -> None:
        if not self.fence.held:
            raise self._refuse(f"epoch {self.fence.epoch} lost its lease; refused a checkpoint")

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        # The lease check costs nothing; the epoch is checked by the database's
        # fence trigger inside the insert itself, so no extra read is needed here.
        self._check_lease()
        try:
            with self._writing_one():
                return await self.inner.aput(config, checkpoint, metadata, new_versions)
        except Exception as error:
            if STALE_EPOCH_MARK not in str(error):
                raise
            # The database's fence trigger refused it inside the insert itself.
            raise self._refuse(str(error)) from error

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._check_lease()
        with self._writing_one():
            newer = await put_writes_fenced(
                self.inner, self.fence.run_id, self.fence.epoch, config, writes, task_id, task_path
            )
        if newer is not None:
            raise self._refuse(f"epoch {self.fence.epoch} is fenced off by {newer}")

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        found = await self.inner.aget_tuple(config)
        configurable = config.get("configurable") or {}
        latest_of_thread = not configurable.get("checkpoint_ns") and not configurable.get(
            "checkpoint_id"
        )
        if latest_of_thread and not self.found_read:
            self.found, self.found_read = found, True
        return found

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async for item in self.inner.alist(config, filter=filter, before=before, limit=limit):
            yield item

    def get_next_version(self, current: Any, channel: Any) -> Any:
        return self.inner.get_next_version(current, channel)
