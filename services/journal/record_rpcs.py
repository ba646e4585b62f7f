"""The records RPCs: request checks and proto <-> `Record` (see records.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from waybill.common import codec
from waybill.common.errors import invalid
from waybill.common.run_records import MAX_PAGE, RECORD_TYPES
from waybill.services.journal.records import Record, RecordPage, RecordStore
from waybill.v1 import journal_pb2


def _run_id(value: str) -> str:
    if not codec.is_uuid(value):
        raise invalid(f"run_id: '{value}' is not a UUID.")
    return value


def _known_type(value: str) -> str:
    if value not in RECORD_TYPES:
        raise invalid(f"type '{value}' is not a record type; one of: {', '.join(RECORD_TYPES)}.")
    return value


def _made_at(value: str) -> datetime:
    if not value:
        return codec.now_utc()
    try:
        made = datetime.fromisoformat(value)
    except ValueError:
        raise invalid(f"created_at: '{value}' is not an RFC 3339 time.") from None
    if made.tzinfo is None:
        raise invalid(f"created_at: '{value}' has no time zone.")
    return made.astimezone(UTC)  # SQLite keeps no offset: store UTC


def _to_proto(record: Record) -> journal_pb2.RunRecord:
    return journal_pb2.RunRecord(
        seq=record.seq, type=record.type, data=record.data, created_at=codec.iso(record.created_at)
    )


async def append_records(
    store: RecordStore, request: journal_pb2.AppendRecordsRequest
) -> journal_pb2.AppendRecordsResponse:
    run_id = _run_id(request.run_id)
    records = [
        Record(_known_type(one.type), one.data or b"{}", _made_at(one.created_at))
        for one in request.records
    ]
    last_seq = await store.append(run_id, request.epoch, records)
    return journal_pb2.AppendRecordsResponse(last_seq=last_seq)


async def list_records(
    store: RecordStore, request: journal_pb2.ListRecordsRequest
) -> journal_pb2.ListRecordsResponse:
    run_id = _run_id(request.run_id)
    if not 1 <= request.limit <= MAX_PAGE:
        raise invalid(f"limit must be between 1 and {MAX_PAGE} (got {request.limit}).")
    if request.offset < 0:
        raise invalid(f"offset must not be negative (got {request.offset}).")
    page = RecordPage(
        types=tuple(dict.fromkeys(_known_type(name) for name in request.types)),
        limit=request.limit,
        offset=request.offset,
        after=request.after if request.HasField("after") else None,
        newest_first=request.newest_first,
    )
    records = await store.page(run_id, page)
    return journal_pb2.ListRecordsResponse(records=[_to_proto(record) for record in records])
