"""A run's records linger and go in one batch, unless a tool starts: what the
runner hands the journal's `AppendRecords`, and when (the journal is a recorder
here; test_token_accounting and test_delivery_faults drive the real one)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from waybill.services.runner.persistence.fencing import RunFence
from waybill.services.runner.reporting.record_sink import RecordSink
from waybill.v1 import journal_pb2

LINGER = 0.5


class RecordingJournal:
    def __init__(self) -> None:
        self.calls: list[tuple[float, list[str]]] = []
        self.started = time.monotonic()

    async def AppendRecords(  # noqa: N802 (the stub's method name)
        self, request: journal_pb2.AppendRecordsRequest, **options: Any
    ) -> journal_pb2.AppendRecordsResponse:
        sent_after = time.monotonic() - self.started
        self.calls.append((sent_after, [record.type for record in request.records]))
        return journal_pb2.AppendRecordsResponse()


def sink_for(journal: Any) -> RecordSink:
    fence = RunFence("run-1", 1, lease_seconds=30.0)
    return RecordSink(journal, "run-1", 1, fence, linger_seconds=LINGER)


async def test_a_short_run_sends_its_records_once_at_its_end() -> None:
    journal = RecordingJournal()
    sink = sink_for(journal)
    sink.emit("llm_start", {})
    sink.emit("llm_end", {})
    await asyncio.sleep(0.05)
    assert journal.calls == []  # lingering
    sink.emit("usage", {})
    await sink.drain()
    assert [types for _, types in journal.calls] == [["llm_start", "llm_end", "usage"]]
    assert journal.calls[0][0] < LINGER  # the drain did not wait for the linger


async def test_a_tool_starting_sends_at_once() -> None:
    journal = RecordingJournal()
    sink = sink_for(journal)
    sink.emit("llm_start", {})
    sink.emit("tool_start", {"name": "wait"})
    for _ in range(50):
        if journal.calls:
            break
        await asyncio.sleep(0.01)
    assert [types for _, types in journal.calls] == [["llm_start", "tool_start"]]
    assert journal.calls[0][0] < LINGER / 2
    sink.emit("tool_end", {})  # lingers again
    await asyncio.sleep(0.05)
    assert len(journal.calls) == 1
    await sink.drain()
    assert [types for _, types in journal.calls][1] == ["tool_end"]


async def test_without_a_drain_a_batch_goes_after_the_linger() -> None:
    journal = RecordingJournal()
    sink = sink_for(journal)
    sink.emit("llm_start", {})
    await asyncio.sleep(LINGER + 0.3)
    assert [types for _, types in journal.calls] == [["llm_start"]]
    assert journal.calls[0][0] >= LINGER
