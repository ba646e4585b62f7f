"""Reading a run's events from the journal's `Subscribe`: batches until the log ends.

The gateway (SSE streams) and delivery (chat answers) both follow runs this way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from waybill.v1 import journal_pb2, journal_pb2_grpc

# Trailing metadata the journal sets on a Subscribe refused because the run's
# events expired (before or while they were read); the gateway answers 410 Gone.
EXPIRED_KEY = "waybill-log-expired"


async def journal_batches(
    journal: journal_pb2_grpc.JournalStub, run_id: str, from_seq: int = 0, live_only: bool = False
) -> AsyncIterator[Sequence[journal_pb2.RunEvent]]:
    """The run's events from `from_seq` on (or only those still to come), in batches."""
    request = journal_pb2.SubscribeRequest(run_id=run_id, from_seq=from_seq, live_only=live_only)
    async for batch in subscribed_batches(journal.Subscribe(request)):
        yield batch


async def subscribed_batches(call: Any) -> AsyncIterator[Sequence[journal_pb2.RunEvent]]:
    """The batches of an open `Subscribe` call, until the log's end; the call is
    cancelled when the reader stops early."""
    try:
        async for item in call:
            if item.events:
                yield item.events
            if item.end:
                return
    finally:
        call.cancel()
