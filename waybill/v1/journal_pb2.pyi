from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JournalStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JournalStatsReply(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: bytes
    def __init__(self, json: _Optional[bytes] = ...) -> None: ...

class ForgetRequest(_message.Message):
    __slots__ = ("run_ids",)
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    run_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ForgetResponse(_message.Message):
    __slots__ = ("forgotten",)
    FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    forgotten: int
    def __init__(self, forgotten: _Optional[int] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("seq", "event", "data")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    seq: int
    event: str
    data: bytes
    def __init__(self, seq: _Optional[int] = ..., event: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class StoredBatch(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[RunEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[RunEvent, _Mapping]]] = ...) -> None: ...

class AppendRequest(_message.Message):
    __slots__ = ("run_id", "epoch", "events")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    epoch: int
    events: _containers.RepeatedCompositeFieldContainer[RunEvent]
    def __init__(self, run_id: _Optional[str] = ..., epoch: _Optional[int] = ..., events: _Optional[_Iterable[_Union[RunEvent, _Mapping]]] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("last_seq", "error")
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    last_seq: int
    error: str
    def __init__(self, last_seq: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class FlushRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class FlushResponse(_message.Message):
    __slots__ = ("durable_seq",)
    DURABLE_SEQ_FIELD_NUMBER: _ClassVar[int]
    durable_seq: int
    def __init__(self, durable_seq: _Optional[int] = ...) -> None: ...

class CloseRequest(_message.Message):
    __slots__ = ("run_id", "epoch")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    epoch: int
    def __init__(self, run_id: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class CloseResponse(_message.Message):
    __slots__ = ("closed",)
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    closed: bool
    def __init__(self, closed: _Optional[bool] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("run_id", "from_seq", "live_only")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    LIVE_ONLY_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    from_seq: int
    live_only: bool
    def __init__(self, run_id: _Optional[str] = ..., from_seq: _Optional[int] = ..., live_only: _Optional[bool] = ...) -> None: ...

class SubscribeItem(_message.Message):
    __slots__ = ("events", "end")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[RunEvent]
    end: bool
    def __init__(self, events: _Optional[_Iterable[_Union[RunEvent, _Mapping]]] = ..., end: _Optional[bool] = ...) -> None: ...

class RunRecord(_message.Message):
    __slots__ = ("seq", "type", "data", "created_at")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    seq: int
    type: str
    data: bytes
    created_at: str
    def __init__(self, seq: _Optional[int] = ..., type: _Optional[str] = ..., data: _Optional[bytes] = ..., created_at: _Optional[str] = ...) -> None: ...

class AppendRecordsRequest(_message.Message):
    __slots__ = ("run_id", "epoch", "records")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    epoch: int
    records: _containers.RepeatedCompositeFieldContainer[RunRecord]
    def __init__(self, run_id: _Optional[str] = ..., epoch: _Optional[int] = ..., records: _Optional[_Iterable[_Union[RunRecord, _Mapping]]] = ...) -> None: ...

class AppendRecordsResponse(_message.Message):
    __slots__ = ("last_seq",)
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    last_seq: int
    def __init__(self, last_seq: _Optional[int] = ...) -> None: ...

class ListRecordsRequest(_message.Message):
    __slots__ = ("run_id", "types", "limit", "offset", "after", "newest_first")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    NEWEST_FIRST_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    types: _containers.RepeatedScalarFieldContainer[str]
    limit: int
    offset: int
    after: int
    newest_first: bool
    def __init__(self, run_id: _Optional[str] = ..., types: _Optional[_Iterable[str]] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., after: _Optional[int] = ..., newest_first: _Optional[bool] = ...) -> None: ...

class ListRecordsResponse(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[RunRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[RunRecord, _Mapping]]] = ...) -> None: ...
