"""Deleting a thread and what hangs off it: the thread and its runs here, their
events (journal) and receipts (delivery), its checkpoints and workspace (runner).

Admission owns the whole cascade: `DELETE /threads/{id}` is one `DeleteThread`
call (the runner's part first, with the thread locked, so a workspace that
cannot be removed keeps its thread), and a cron's fresh thread
(`on_run_completed: delete`) and an expired one (its TTL's `delete`) go the same
way; an expired thread's `keep_latest` is the runner's prune (thread_ttl.py)."""

from __future__ import annotations

from datetime import datetime

import grpc

from waybill.common.errors import ServiceError
from waybill.common.grpc_channels import PeerChannels
from waybill.services.admission.threads.thread_store import Filter, ThreadStore
from waybill.v1 import (
    delivery_pb2,
    delivery_pb2_grpc,
    journal_pb2,
    journal_pb2_grpc,
    runner_pb2,
    runner_pb2_grpc,
)


class ThreadRemoval:
    def __init__(self, store: ThreadStore, channels: PeerChannels, timeout: float) -> None:
        self.store = store
        self.timeout = timeout
        self.journal = journal_pb2_grpc.JournalStub(channels.journal())
        self.delivery = delivery_pb2_grpc.DeliveryStub(channels.delivery())
        self.runner = runner_pb2_grpc.RunnerStub(channels.runner_reads())

    async def delete(
        self, thread_id: str, owner: str | None = None, auth: Filter = None
    ) -> list[str]:
        """Delete the thread, if `owner` may (404 if not, 409 while a run is active),
        and everything of it the other services hold. Returns its runs' ids."""
        run_ids = await self.store.delete_thread(
            thread_id, owner, auth, before_delete=lambda: self._remove_state(thread_id)
        )
        await self._forget(thread_id, run_ids)
        return run_ids

    async def expired(self, now: datetime, limit: int) -> list[tuple[str, str]]:
        return await self.store.expired_threads(now, limit)

    async def delete_expired(self, thread_id: str, now: datetime) -> None:
        """The TTL's `delete`: as `delete`, unless the thread was refreshed since `now`."""
        run_ids = await self.store.delete_thread(
            thread_id, before_delete=lambda: self._remove_state(thread_id), expired_by=now
        )
        await self._forget(thread_id, run_ids)

    async def keep_latest_expired(self, thread_id: str, now: datetime) -> None:
        """The TTL's `keep_latest`: the runner keeps the newest checkpoint of each
        namespace (as `POST /threads/prune` does), the thread locked meanwhile."""

        async def prune() -> None:
            await self.runner.PruneThreadState(
                runner_pb2.PruneThreadStateRequest(thread_id=thread_id), timeout=self.timeout
            )

        await self.store.keep_latest_expired(thread_id, now, prune)

    async def remove(self, thread_id: str) -> None:
        """Delete the thread on nobody's behalf; one already gone counts as done
        (what the other services still hold of it is forgotten all the same)."""
        try:
            await self.delete(thread_id)
        except ServiceError as error:
            if error.code != grpc.StatusCode.NOT_FOUND:
                raise  # e.g. someone started another run on it: it stays
            await self._forget(thread_id, [])
            await self._remove_state(thread_id)

    async def _remove_state(self, thread_id: str) -> None:
        """The runner's part (workspace first, then checkpoints), before the record
        goes: a workspace that cannot be removed keeps its thread (503), so a
        thread never leaves files behind that nothing names any more."""
        try:
            await self.runner.DeleteThreadState(
                runner_pb2.DeleteThreadStateRequest(thread_id=thread_id), timeout=self.timeout
            )
        except grpc.aio.AioRpcError as error:
            if error.code() not in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
            ):
                raise
            raise ServiceError(
                grpc.StatusCode.UNAVAILABLE,
                f"Thread {thread_id} is kept: its state could not be removed "
                f"({error.details() or error.code().name}); retry the delete.",
            ) from error

    async def _forget(self, thread_id: str, run_ids: list[str]) -> None:
        if run_ids:
            await self.journal.Forget(
                journal_pb2.ForgetRequest(run_ids=run_ids), timeout=self.timeout
            )
        await self.delivery.ForgetReceipts(
            delivery_pb2.ForgetReceiptsRequest(thread_id=thread_id, run_ids=run_ids),
            timeout=self.timeout,
        )
