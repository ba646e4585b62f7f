from waybill.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SnapshotRequest(_message.Message):
    __slots__ = ("run_id", "thread_id", "epoch", "continues_run_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CONTINUES_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    thread_id: str
    epoch: int
    continues_run_id: str
    def __init__(self, run_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., epoch: _Optional[int] = ..., continues_run_id: _Optional[str] = ...) -> None: ...

class SnapshotResponse(_message.Message):
    __slots__ = ("files", "existing")
    FILES_FIELD_NUMBER: _ClassVar[int]
    EXISTING_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[WorkspaceFile]
    existing: bool
    def __init__(self, files: _Optional[_Iterable[_Union[WorkspaceFile, _Mapping]]] = ..., existing: _Optional[bool] = ...) -> None: ...

class WorkspaceFile(_message.Message):
    __slots__ = ("path", "size", "sha256")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    path: str
    size: int
    sha256: str
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class FileChange(_message.Message):
    __slots__ = ("path", "change", "size", "sha256")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    path: str
    change: str
    size: int
    sha256: str
    def __init__(self, path: _Optional[str] = ..., change: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class ConfirmFinishedRequest(_message.Message):
    __slots__ = ("run_id", "epoch")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    epoch: int
    def __init__(self, run_id: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class ConfirmFinishedResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: int
    def __init__(self, released: _Optional[int] = ...) -> None: ...

class ListOutputsRequest(_message.Message):
    __slots__ = ("thread_id",)
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    def __init__(self, thread_id: _Optional[str] = ...) -> None: ...

class ListOutputsResponse(_message.Message):
    __slots__ = ("outputs",)
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    outputs: _containers.RepeatedCompositeFieldContainer[Output]
    def __init__(self, outputs: _Optional[_Iterable[_Union[Output, _Mapping]]] = ...) -> None: ...

class Output(_message.Message):
    __slots__ = ("file", "run_id")
    FILE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    file: WorkspaceFile
    run_id: str
    def __init__(self, file: _Optional[_Union[WorkspaceFile, _Mapping]] = ..., run_id: _Optional[str] = ...) -> None: ...

class ReadOutputRequest(_message.Message):
    __slots__ = ("thread_id", "path")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    path: str
    def __init__(self, thread_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class UploadRequest(_message.Message):
    __slots__ = ("thread_id", "name", "data")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    name: str
    data: bytes
    def __init__(self, thread_id: _Optional[str] = ..., name: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class ListDeliveriesRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class ListDeliveriesResponse(_message.Message):
    __slots__ = ("deliveries",)
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[WebhookDelivery]
    def __init__(self, deliveries: _Optional[_Iterable[_Union[WebhookDelivery, _Mapping]]] = ...) -> None: ...

class WebhookDelivery(_message.Message):
    __slots__ = ("delivery_id", "run_id", "epoch", "url", "source", "state", "next_attempt_at", "attempts", "created_at")
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    delivery_id: str
    run_id: str
    epoch: int
    url: str
    source: str
    state: str
    next_attempt_at: str
    attempts: _containers.RepeatedCompositeFieldContainer[WebhookAttempt]
    created_at: str
    def __init__(self, delivery_id: _Optional[str] = ..., run_id: _Optional[str] = ..., epoch: _Optional[int] = ..., url: _Optional[str] = ..., source: _Optional[str] = ..., state: _Optional[str] = ..., next_attempt_at: _Optional[str] = ..., attempts: _Optional[_Iterable[_Union[WebhookAttempt, _Mapping]]] = ..., created_at: _Optional[str] = ...) -> None: ...

class WebhookAttempt(_message.Message):
    __slots__ = ("attempt", "attempt_id", "sent_at", "status_code", "error")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_FIELD_NUMBER: _ClassVar[int]
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    attempt_id: str
    sent_at: str
    status_code: int
    error: str
    def __init__(self, attempt: _Optional[int] = ..., attempt_id: _Optional[str] = ..., sent_at: _Optional[str] = ..., status_code: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class WebhookSubscribeRequest(_message.Message):
    __slots__ = ("scope", "scope_id", "url")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    scope: str
    scope_id: str
    url: str
    def __init__(self, scope: _Optional[str] = ..., scope_id: _Optional[str] = ..., url: _Optional[str] = ...) -> None: ...

class WebhookSubscription(_message.Message):
    __slots__ = ("subscription_id", "scope", "scope_id", "url", "created_at")
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    subscription_id: str
    scope: str
    scope_id: str
    url: str
    created_at: str
    def __init__(self, subscription_id: _Optional[str] = ..., scope: _Optional[str] = ..., scope_id: _Optional[str] = ..., url: _Optional[str] = ..., created_at: _Optional[str] = ...) -> None: ...

class ListWebhookSubscriptionsRequest(_message.Message):
    __slots__ = ("scope", "scope_id")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    scope: str
    scope_id: str
    def __init__(self, scope: _Optional[str] = ..., scope_id: _Optional[str] = ...) -> None: ...

class ListWebhookSubscriptionsResponse(_message.Message):
    __slots__ = ("subscriptions",)
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    subscriptions: _containers.RepeatedCompositeFieldContainer[WebhookSubscription]
    def __init__(self, subscriptions: _Optional[_Iterable[_Union[WebhookSubscription, _Mapping]]] = ...) -> None: ...

class WebhookUnsubscribeRequest(_message.Message):
    __slots__ = ("scope", "scope_id", "subscription_id")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_ID_FIELD_NUMBER: _ClassVar[int]
    scope: str
    scope_id: str
    subscription_id: str
    def __init__(self, scope: _Optional[str] = ..., scope_id: _Optional[str] = ..., subscription_id: _Optional[str] = ...) -> None: ...

class WebhookUnsubscribeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

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
    __slots__ = ("run_id", "thread_id", "epoch", "outcome", "final_output_json", "error", "assistant_id", "verify_workspace", "presented", "paused", "webhook", "values_json", "usage_json", "untouched", "continues_run_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    FINAL_OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ASSISTANT_ID_FIELD_NUMBER: _ClassVar[int]
    VERIFY_WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    PRESENTED_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    VALUES_JSON_FIELD_NUMBER: _ClassVar[int]
    USAGE_JSON_FIELD_NUMBER: _ClassVar[int]
    UNTOUCHED_FIELD_NUMBER: _ClassVar[int]
    CONTINUES_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    thread_id: str
    epoch: int
    outcome: _common_pb2.RunStatus
    final_output_json: bytes
    error: _common_pb2.RunError
    assistant_id: str
    verify_workspace: bool
    presented: _containers.RepeatedScalarFieldContainer[str]
    paused: bool
    webhook: str
    values_json: bytes
    usage_json: bytes
    untouched: bool
    continues_run_id: str
    def __init__(self, run_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., epoch: _Optional[int] = ..., outcome: _Optional[_Union[_common_pb2.RunStatus, str]] = ..., final_output_json: _Optional[bytes] = ..., error: _Optional[_Union[_common_pb2.RunError, _Mapping]] = ..., assistant_id: _Optional[str] = ..., verify_workspace: _Optional[bool] = ..., presented: _Optional[_Iterable[str]] = ..., paused: _Optional[bool] = ..., webhook: _Optional[str] = ..., values_json: _Optional[bytes] = ..., usage_json: _Optional[bytes] = ..., untouched: _Optional[bool] = ..., continues_run_id: _Optional[str] = ...) -> None: ...

class GetReceiptRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class Receipt(_message.Message):
    __slots__ = ("run_id", "thread_id", "epoch", "outcome", "final_output_json", "error", "created_at", "verdict", "verdict_reason", "presented", "produced", "matched", "changes", "usage_json", "webhooks_held")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    FINAL_OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    VERDICT_REASON_FIELD_NUMBER: _ClassVar[int]
    PRESENTED_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    USAGE_JSON_FIELD_NUMBER: _ClassVar[int]
    WEBHOOKS_HELD_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    thread_id: str
    epoch: int
    outcome: _common_pb2.RunStatus
    final_output_json: bytes
    error: _common_pb2.RunError
    created_at: str
    verdict: str
    verdict_reason: str
    presented: _containers.RepeatedScalarFieldContainer[str]
    produced: _containers.RepeatedScalarFieldContainer[str]
    matched: _containers.RepeatedScalarFieldContainer[str]
    changes: _containers.RepeatedCompositeFieldContainer[FileChange]
    usage_json: bytes
    webhooks_held: int
    def __init__(self, run_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., epoch: _Optional[int] = ..., outcome: _Optional[_Union[_common_pb2.RunStatus, str]] = ..., final_output_json: _Optional[bytes] = ..., error: _Optional[_Union[_common_pb2.RunError, _Mapping]] = ..., created_at: _Optional[str] = ..., verdict: _Optional[str] = ..., verdict_reason: _Optional[str] = ..., presented: _Optional[_Iterable[str]] = ..., produced: _Optional[_Iterable[str]] = ..., matched: _Optional[_Iterable[str]] = ..., changes: _Optional[_Iterable[_Union[FileChange, _Mapping]]] = ..., usage_json: _Optional[bytes] = ..., webhooks_held: _Optional[int] = ...) -> None: ...
