from waybill.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ForgetReceiptsRequest(_message.Message):
    __slots__ = ("thread_id", "run_ids")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    run_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, thread_id: _Optional[str] = ..., run_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ForgetReceiptsResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: int
    def __init__(self, deleted: _Optional[int] = ...) -> None: ...

class WriteReceiptRequest(_message.Message):
    __slots__ = ("run_id", "thread_id", "epoch", "outcome", "final_output_json", "error")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    FINAL_OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    thread_id: str
    epoch: int
    outcome: _common_pb2.RunStatus
    final_output_json: bytes
    error: _common_pb2.RunError
    def __init__(self, run_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., epoch: _Optional[int] = ..., outcome: _Optional[_Union[_common_pb2.RunStatus, str]] = ..., final_output_json: _Optional[bytes] = ..., error: _Optional[_Union[_common_pb2.RunError, _Mapping]] = ...) -> None: ...

class GetReceiptRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class Receipt(_message.Message):
    __slots__ = ("run_id", "thread_id", "epoch", "outcome", "final_output_json", "error", "created_at", "verdict")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    FINAL_OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    thread_id: str
    epoch: int
    outcome: _common_pb2.RunStatus
    final_output_json: bytes
    error: _common_pb2.RunError
    created_at: str
    verdict: str
    def __init__(self, run_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., epoch: _Optional[int] = ..., outcome: _Optional[_Union[_common_pb2.RunStatus, str]] = ..., final_output_json: _Optional[bytes] = ..., error: _Optional[_Union[_common_pb2.RunError, _Mapping]] = ..., created_at: _Optional[str] = ..., verdict: _Optional[str] = ...) -> None: ...
