"""Writing a receipt: snapshot after, changes since the run's first snapshot,
the verdict, the webhooks owed; then one transaction stores it all."""

from __future__ import annotations

import asyncio
import uuid

from waybill.common import codec
from waybill.common.settings import Settings
from waybill.services.delivery.outbox_store import OutboxStore
from waybill.services.delivery.store import OwedWebhook, ReceiptRecord, ReceiptStore
from waybill.services.delivery.verification import RunEnding, judge
from waybill.services.delivery.workspace_files import FileEntry, changes, snapshot_of
from waybill.v1 import delivery_pb2


async def owed_webhooks(
    request: delivery_pb2.WriteReceiptRequest, outbox: OutboxStore
) -> list[OwedWebhook]:
    """The run's own webhook, then its thread's and its assistant's subscribers
    (one delivery per distinct URL)."""
    targets: list[tuple[str, str]] = []
    if request.webhook:
        targets.append((request.webhook, "run"))
    scopes = [("thread", request.thread_id), ("assistant", request.assistant_id)]
    subscriptions = await outbox.subscriptions_of([(s, one) for s, one in scopes if one])
    targets.extend((s.url, s.scope) for s in subscriptions)
    seen: set[str] = set()
    owed = []
    for url, source in targets:
        if url not in seen:
            seen.add(url)
            owed.append(OwedWebhook(str(uuid.uuid4()), url, source))
    return owed


async def _stored_facts(
    request: delivery_pb2.WriteReceiptRequest, store: ReceiptStore, outbox: OutboxStore
) -> tuple[list[FileEntry] | None, list[OwedWebhook]]:
    """The run's first snapshot (None: none taken) and the webhooks it owes."""
    return await store.first_snapshot(request.run_id), await owed_webhooks(request, outbox)


async def write_receipt(
    request: delivery_pb2.WriteReceiptRequest,
    settings: Settings,
    store: ReceiptStore,
    outbox: OutboxStore,
) -> tuple[ReceiptRecord, int]:
    """The stored receipt, and how many webhooks it holds in the outbox."""
    outcome = codec.RUN_STATUS_NAMES.get(request.outcome, "error")
    # The walk of the workspace (a thread) beside the reads, which go one after
    # another: each is a fraction of a millisecond, and run at once on three
    # connections they took longer than in a row.
    after, (before, owed) = await asyncio.gather(
        snapshot_of(settings, request.thread_id),
        _stored_facts(request, store, outbox),
    )
    first_snapshot = None
    if before is None and request.untouched:
        # No before-snapshot was taken because nothing of the run changed the
        # workspace: as it is now is as the run found it (or as the paused run it
        # continues found it). Stored as the run's first, with the receipt.
        continued = await store.continued_snapshot(request.continues_run_id)
        before = first_snapshot = after if continued is None else continued
    before = before or []
    changed = changes(before, after)
    verdict = judge(
        RunEnding(
            outcome=outcome,
            error_message=request.error.message,
            verify_workspace=request.verify_workspace,
            paused=request.paused,
            presented=list(request.presented),
        ),
        changed,
        after,
    )
    record = ReceiptRecord(
        run_id=request.run_id,
        epoch=request.epoch,
        thread_id=request.thread_id,
        assistant_id=request.assistant_id,
        outcome=outcome,
        verdict=verdict.verdict,
        verdict_reason=verdict.reason,
        final_output=request.final_output_json or b"null",
        error_type=request.error.error,
        error_message=request.error.message,
        presented=verdict.presented,
        produced=verdict.produced,
        matched=verdict.matched,
        changes=changed,
        usage=codec.loads(request.usage_json, {}),
        created_at=codec.now_utc(),
    )
    await store.write(record, owed, request.values_json or b"null", first_snapshot)
    return record, len(owed)
