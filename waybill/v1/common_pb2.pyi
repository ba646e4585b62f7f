from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATUS_UNSPECIFIED: _ClassVar[RunStatus]
    RUN_STATUS_PENDING: _ClassVar[RunStatus]
    RUN_STATUS_RUNNING: _ClassVar[RunStatus]
    RUN_STATUS_SUCCESS: _ClassVar[RunStatus]
    RUN_STATUS_ERROR: _ClassVar[RunStatus]
    RUN_STATUS_TIMEOUT: _ClassVar[RunStatus]
    RUN_STATUS_INTERRUPTED: _ClassVar[RunStatus]

class MultitaskStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MULTITASK_STRATEGY_UNSPECIFIED: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_REJECT: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_INTERRUPT: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_ROLLBACK: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_ENQUEUE: _ClassVar[MultitaskStrategy]
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_PENDING: RunStatus
RUN_STATUS_RUNNING: RunStatus
RUN_STATUS_SUCCESS: RunStatus
RUN_STATUS_ERROR: RunStatus
RUN_STATUS_TIMEOUT: RunStatus
RUN_STATUS_INTERRUPTED: RunStatus
MULTITASK_STRATEGY_UNSPECIFIED: MultitaskStrategy
MULTITASK_STRATEGY_REJECT: MultitaskStrategy
MULTITASK_STRATEGY_INTERRUPT: MultitaskStrategy
MULTITASK_STRATEGY_ROLLBACK: MultitaskStrategy
MULTITASK_STRATEGY_ENQUEUE: MultitaskStrategy

class Thread(_message.Message):
    __slots__ = ("thread_id", "created_at", "updated_at", "metadata_json", "status", "values_json", "interrupts_json", "owner_id", "config_json", "error", "state_updated_at", "ttl")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VALUES_JSON_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTS_JSON_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STATE_UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    created_at: str
    updated_at: str
    metadata_json: bytes
    status: str
    values_json: bytes
    interrupts_json: bytes
    owner_id: str
    config_json: bytes
    error: RunError
    state_updated_at: str
    ttl: ThreadTTL
    def __init__(self, thread_id: _Optional[str] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ..., metadata_json: _Optional[bytes] = ..., status: _Optional[str] = ..., values_json: _Optional[bytes] = ..., interrupts_json: _Optional[bytes] = ..., owner_id: _Optional[str] = ..., config_json: _Optional[bytes] = ..., error: _Optional[_Union[RunError, _Mapping]] = ..., state_updated_at: _Optional[str] = ..., ttl: _Optional[_Union[ThreadTTL, _Mapping]] = ...) -> None: ...

class ThreadTTL(_message.Message):
    __slots__ = ("strategy", "minutes", "expires_at")
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    MINUTES_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    strategy: str
    minutes: float
    expires_at: str
    def __init__(self, strategy: _Optional[str] = ..., minutes: _Optional[float] = ..., expires_at: _Optional[str] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "thread_id", "assistant_id", "graph_id", "status", "multitask_strategy", "metadata_json", "kwargs_json", "created_at", "updated_at", "epoch", "attempt", "stop_reason", "cancel_action", "owner_id", "usage_json")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ASSISTANT_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MULTITASK_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    CANCEL_ACTION_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_JSON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    thread_id: str
    assistant_id: str
    graph_id: str
    status: RunStatus
    multitask_strategy: MultitaskStrategy
    metadata_json: bytes
    kwargs_json: bytes
    created_at: str
    updated_at: str
    epoch: int
    attempt: int
    stop_reason: str
    cancel_action: str
    owner_id: str
    usage_json: bytes
    def __init__(self, run_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., assistant_id: _Optional[str] = ..., graph_id: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., multitask_strategy: _Optional[_Union[MultitaskStrategy, str]] = ..., metadata_json: _Optional[bytes] = ..., kwargs_json: _Optional[bytes] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ..., epoch: _Optional[int] = ..., attempt: _Optional[int] = ..., stop_reason: _Optional[str] = ..., cancel_action: _Optional[str] = ..., owner_id: _Optional[str] = ..., usage_json: _Optional[bytes] = ...) -> None: ...

class RunError(_message.Message):
    __slots__ = ("error", "message")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error: str
    message: str
    def __init__(self, error: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...
