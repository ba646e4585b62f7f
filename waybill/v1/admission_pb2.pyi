from waybill.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateThreadRequest(_message.Message):
    __slots__ = ("thread_id", "metadata_json", "if_exists", "ttl")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    metadata_json: bytes
    if_exists: str
    ttl: _common_pb2.ThreadTTL
    def __init__(self, thread_id: _Optional[str] = ..., metadata_json: _Optional[bytes] = ..., if_exists: _Optional[str] = ..., ttl: _Optional[_Union[_common_pb2.ThreadTTL, _Mapping]] = ...) -> None: ...

class GetThreadRequest(_message.Message):
    __slots__ = ("thread_id",)
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    def __init__(self, thread_id: _Optional[str] = ...) -> None: ...

class PatchThreadRequest(_message.Message):
    __slots__ = ("thread_id", "metadata_json", "metadata_if_absent_json", "ttl")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    METADATA_IF_ABSENT_JSON_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    metadata_json: bytes
    metadata_if_absent_json: bytes
    ttl: _common_pb2.ThreadTTL
    def __init__(self, thread_id: _Optional[str] = ..., metadata_json: _Optional[bytes] = ..., metadata_if_absent_json: _Optional[bytes] = ..., ttl: _Optional[_Union[_common_pb2.ThreadTTL, _Mapping]] = ...) -> None: ...

class RecordThreadStateRequest(_message.Message):
    __slots__ = ("thread_id", "values_json", "interrupts_json", "status")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    VALUES_JSON_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTS_JSON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    values_json: bytes
    interrupts_json: bytes
    status: str
    def __init__(self, thread_id: _Optional[str] = ..., values_json: _Optional[bytes] = ..., interrupts_json: _Optional[bytes] = ..., status: _Optional[str] = ...) -> None: ...

class DeleteThreadRequest(_message.Message):
    __slots__ = ("thread_id",)
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    def __init__(self, thread_id: _Optional[str] = ...) -> None: ...

class DeleteThreadResponse(_message.Message):
    __slots__ = ("run_ids",)
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    run_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class SearchThreadsRequest(_message.Message):
    __slots__ = ("metadata_json", "status", "limit", "offset", "values_json", "ids", "sort_by", "sort_order")
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    VALUES_JSON_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    SORT_BY_FIELD_NUMBER: _ClassVar[int]
    SORT_ORDER_FIELD_NUMBER: _ClassVar[int]
    metadata_json: bytes
    status: str
    limit: int
    offset: int
    values_json: bytes
    ids: _containers.RepeatedScalarFieldContainer[str]
    sort_by: str
    sort_order: str
    def __init__(self, metadata_json: _Optional[bytes] = ..., status: _Optional[str] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., values_json: _Optional[bytes] = ..., ids: _Optional[_Iterable[str]] = ..., sort_by: _Optional[str] = ..., sort_order: _Optional[str] = ...) -> None: ...

class SearchThreadsResponse(_message.Message):
    __slots__ = ("threads",)
    THREADS_FIELD_NUMBER: _ClassVar[int]
    threads: _containers.RepeatedCompositeFieldContainer[_common_pb2.Thread]
    def __init__(self, threads: _Optional[_Iterable[_Union[_common_pb2.Thread, _Mapping]]] = ...) -> None: ...

class CountThreadsRequest(_message.Message):
    __slots__ = ("metadata_json", "values_json", "status")
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    VALUES_JSON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    metadata_json: bytes
    values_json: bytes
    status: str
    def __init__(self, metadata_json: _Optional[bytes] = ..., values_json: _Optional[bytes] = ..., status: _Optional[str] = ...) -> None: ...

class CountThreadsResponse(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ("thread_id", "assistant_id", "kwargs_json", "metadata_json", "multitask_strategy", "if_not_exists", "idempotency_key", "after_seconds", "auth_filters_json")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ASSISTANT_ID_FIELD_NUMBER: _ClassVar[int]
    KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    MULTITASK_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    IF_NOT_EXISTS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    AUTH_FILTERS_JSON_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    assistant_id: str
    kwargs_json: bytes
    metadata_json: bytes
    multitask_strategy: _common_pb2.MultitaskStrategy
    if_not_exists: str
    idempotency_key: str
    after_seconds: float
    auth_filters_json: bytes
    def __init__(self, thread_id: _Optional[str] = ..., assistant_id: _Optional[str] = ..., kwargs_json: _Optional[bytes] = ..., metadata_json: _Optional[bytes] = ..., multitask_strategy: _Optional[_Union[_common_pb2.MultitaskStrategy, str]] = ..., if_not_exists: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., after_seconds: _Optional[float] = ..., auth_filters_json: _Optional[bytes] = ...) -> None: ...

class StartRunsRequest(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[StartRunRequest]
    def __init__(self, runs: _Optional[_Iterable[_Union[StartRunRequest, _Mapping]]] = ...) -> None: ...

class StartRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_common_pb2.Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[_common_pb2.Run, _Mapping]]] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("thread_id", "run_id")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    run_id: str
    def __init__(self, thread_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("thread_id", "limit", "offset", "status")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    limit: int
    offset: int
    status: _common_pb2.RunStatus
    def __init__(self, thread_id: _Optional[str] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., status: _Optional[_Union[_common_pb2.RunStatus, str]] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_common_pb2.Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[_common_pb2.Run, _Mapping]]] = ...) -> None: ...

class DeleteRunResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Assistant(_message.Message):
    __slots__ = ("assistant_id", "graph_id", "name", "config_json", "metadata_json", "created_at", "updated_at", "version", "description", "context_json")
    ASSISTANT_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_JSON_FIELD_NUMBER: _ClassVar[int]
    assistant_id: str
    graph_id: str
    name: str
    config_json: bytes
    metadata_json: bytes
    created_at: str
    updated_at: str
    version: int
    description: str
    context_json: bytes
    def __init__(self, assistant_id: _Optional[str] = ..., graph_id: _Optional[str] = ..., name: _Optional[str] = ..., config_json: _Optional[bytes] = ..., metadata_json: _Optional[bytes] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ..., version: _Optional[int] = ..., description: _Optional[str] = ..., context_json: _Optional[bytes] = ...) -> None: ...

class SearchAssistantsRequest(_message.Message):
    __slots__ = ("graph_id", "limit", "offset", "metadata_json", "name", "sort_by", "sort_order")
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SORT_BY_FIELD_NUMBER: _ClassVar[int]
    SORT_ORDER_FIELD_NUMBER: _ClassVar[int]
    graph_id: str
    limit: int
    offset: int
    metadata_json: bytes
    name: str
    sort_by: str
    sort_order: str
    def __init__(self, graph_id: _Optional[str] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., metadata_json: _Optional[bytes] = ..., name: _Optional[str] = ..., sort_by: _Optional[str] = ..., sort_order: _Optional[str] = ...) -> None: ...

class SearchAssistantsResponse(_message.Message):
    __slots__ = ("assistants", "has_more")
    ASSISTANTS_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    assistants: _containers.RepeatedCompositeFieldContainer[Assistant]
    has_more: bool
    def __init__(self, assistants: _Optional[_Iterable[_Union[Assistant, _Mapping]]] = ..., has_more: _Optional[bool] = ...) -> None: ...

class GetAssistantRequest(_message.Message):
    __slots__ = ("assistant_id",)
    ASSISTANT_ID_FIELD_NUMBER: _ClassVar[int]
    assistant_id: str
    def __init__(self, assistant_id: _Optional[str] = ...) -> None: ...

class CreateAssistantRequest(_message.Message):
    __slots__ = ("assistant_id", "graph_id", "config_json", "context_json", "metadata_json", "name", "description", "if_exists")
    ASSISTANT_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_JSON_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    assistant_id: str
    graph_id: str
    config_json: bytes
    context_json: bytes
    metadata_json: bytes
    name: str
    description: str
    if_exists: str
    def __init__(self, assistant_id: _Optional[str] = ..., graph_id: _Optional[str] = ..., config_json: _Optional[bytes] = ..., context_json: _Optional[bytes] = ..., metadata_json: _Optional[bytes] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., if_exists: _Optional[str] = ...) -> None: ...

class PatchAssistantRequest(_message.Message):
    __slots__ = ("assistant_id", "graph_id", "config_json", "context_json", "metadata_json", "name", "description")
    ASSISTANT_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_JSON_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    assistant_id: str
    graph_id: str
    config_json: bytes
    context_json: bytes
    metadata_json: bytes
    name: str
    description: str
    def __init__(self, assistant_id: _Optional[str] = ..., graph_id: _Optional[str] = ..., config_json: _Optional[bytes] = ..., context_json: _Optional[bytes] = ..., metadata_json: _Optional[bytes] = ..., name: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class DeleteAssistantRequest(_message.Message):
    __slots__ = ("assistant_id",)
    ASSISTANT_ID_FIELD_NUMBER: _ClassVar[int]
    assistant_id: str
    def __init__(self, assistant_id: _Optional[str] = ...) -> None: ...

class DeleteAssistantResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CountAssistantsRequest(_message.Message):
    __slots__ = ("graph_id", "metadata_json", "name")
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    graph_id: str
    metadata_json: bytes
    name: str
    def __init__(self, graph_id: _Optional[str] = ..., metadata_json: _Optional[bytes] = ..., name: _Optional[str] = ...) -> None: ...

class CountAssistantsResponse(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class ListAssistantVersionsRequest(_message.Message):
    __slots__ = ("assistant_id", "metadata_json", "limit", "offset")
    ASSISTANT_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    assistant_id: str
    metadata_json: bytes
    limit: int
    offset: int
    def __init__(self, assistant_id: _Optional[str] = ..., metadata_json: _Optional[bytes] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ListAssistantVersionsResponse(_message.Message):
    __slots__ = ("versions",)
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[Assistant]
    def __init__(self, versions: _Optional[_Iterable[_Union[Assistant, _Mapping]]] = ...) -> None: ...

class SetLatestAssistantVersionRequest(_message.Message):
    __slots__ = ("assistant_id", "version")
    ASSISTANT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    assistant_id: str
    version: int
    def __init__(self, assistant_id: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class WorkRequest(_message.Message):
    __slots__ = ("hello", "renew", "draining", "released", "log_closed")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    RENEW_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    LOG_CLOSED_FIELD_NUMBER: _ClassVar[int]
    hello: RunnerHello
    renew: LeaseRenewal
    draining: RunnerDraining
    released: RunLease
    log_closed: RunLease
    def __init__(self, hello: _Optional[_Union[RunnerHello, _Mapping]] = ..., renew: _Optional[_Union[LeaseRenewal, _Mapping]] = ..., draining: _Optional[_Union[RunnerDraining, _Mapping]] = ..., released: _Optional[_Union[RunLease, _Mapping]] = ..., log_closed: _Optional[_Union[RunLease, _Mapping]] = ...) -> None: ...

class LeaseRenewal(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[RunLease]
    def __init__(self, leases: _Optional[_Iterable[_Union[RunLease, _Mapping]]] = ...) -> None: ...

class RenewLeasesRequest(_message.Message):
    __slots__ = ("runner_id", "leases", "loop_stalled")
    RUNNER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    LOOP_STALLED_FIELD_NUMBER: _ClassVar[int]
    runner_id: str
    leases: _containers.RepeatedCompositeFieldContainer[RunLease]
    loop_stalled: bool
    def __init__(self, runner_id: _Optional[str] = ..., leases: _Optional[_Iterable[_Union[RunLease, _Mapping]]] = ..., loop_stalled: _Optional[bool] = ...) -> None: ...

class RunLease(_message.Message):
    __slots__ = ("run_id", "epoch")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    epoch: int
    def __init__(self, run_id: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class RunnerDraining(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RunnerHello(_message.Message):
    __slots__ = ("runner_id", "slots")
    RUNNER_ID_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    runner_id: str
    slots: int
    def __init__(self, runner_id: _Optional[str] = ..., slots: _Optional[int] = ...) -> None: ...

class RunFinished(_message.Message):
    __slots__ = ("run_id", "runner_id", "epoch", "status", "stop_reason", "values_json", "interrupts_json", "thread_status", "rolled_back", "token_counts", "error")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RUNNER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    VALUES_JSON_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTS_JSON_FIELD_NUMBER: _ClassVar[int]
    THREAD_STATUS_FIELD_NUMBER: _ClassVar[int]
    ROLLED_BACK_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    runner_id: str
    epoch: int
    status: _common_pb2.RunStatus
    stop_reason: str
    values_json: bytes
    interrupts_json: bytes
    thread_status: str
    rolled_back: bool
    token_counts: _containers.RepeatedCompositeFieldContainer[TokenCount]
    error: _common_pb2.RunError
    def __init__(self, run_id: _Optional[str] = ..., runner_id: _Optional[str] = ..., epoch: _Optional[int] = ..., status: _Optional[_Union[_common_pb2.RunStatus, str]] = ..., stop_reason: _Optional[str] = ..., values_json: _Optional[bytes] = ..., interrupts_json: _Optional[bytes] = ..., thread_status: _Optional[str] = ..., rolled_back: _Optional[bool] = ..., token_counts: _Optional[_Iterable[_Union[TokenCount, _Mapping]]] = ..., error: _Optional[_Union[_common_pb2.RunError, _Mapping]] = ...) -> None: ...

class RunUsageReport(_message.Message):
    __slots__ = ("run_id", "epoch", "token_counts")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNTS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    epoch: int
    token_counts: _containers.RepeatedCompositeFieldContainer[TokenCount]
    def __init__(self, run_id: _Optional[str] = ..., epoch: _Optional[int] = ..., token_counts: _Optional[_Iterable[_Union[TokenCount, _Mapping]]] = ...) -> None: ...

class RecordRunUsageResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...

class TokenCount(_message.Message):
    __slots__ = ("model", "source", "input_tokens", "output_tokens", "total_tokens", "cache_read_tokens", "llm_calls", "cost")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_READ_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LLM_CALLS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    model: str
    source: str
    input_tokens: int
    output_tokens: int
    total_tokens: int
    cache_read_tokens: int
    llm_calls: int
    cost: float
    def __init__(self, model: _Optional[str] = ..., source: _Optional[str] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ..., cache_read_tokens: _Optional[int] = ..., llm_calls: _Optional[int] = ..., cost: _Optional[float] = ...) -> None: ...

class GetTokenUsageRequest(_message.Message):
    __slots__ = ("thread_id", "owner_id")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    owner_id: str
    def __init__(self, thread_id: _Optional[str] = ..., owner_id: _Optional[str] = ...) -> None: ...

class GetQuotaRequest(_message.Message):
    __slots__ = ("principal_id",)
    PRINCIPAL_ID_FIELD_NUMBER: _ClassVar[int]
    principal_id: str
    def __init__(self, principal_id: _Optional[str] = ...) -> None: ...

class QuotaReport(_message.Message):
    __slots__ = ("report_json",)
    REPORT_JSON_FIELD_NUMBER: _ClassVar[int]
    report_json: bytes
    def __init__(self, report_json: _Optional[bytes] = ...) -> None: ...

class TokenUsage(_message.Message):
    __slots__ = ("usage_json", "runs")
    USAGE_JSON_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    usage_json: bytes
    runs: int
    def __init__(self, usage_json: _Optional[bytes] = ..., runs: _Optional[int] = ...) -> None: ...

class WorkAssignment(_message.Message):
    __slots__ = ("run", "cancel", "lease", "start_now")
    RUN_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    START_NOW_FIELD_NUMBER: _ClassVar[int]
    run: _common_pb2.Run
    cancel: CancelOrder
    lease: LeaseGrant
    start_now: bool
    def __init__(self, run: _Optional[_Union[_common_pb2.Run, _Mapping]] = ..., cancel: _Optional[_Union[CancelOrder, _Mapping]] = ..., lease: _Optional[_Union[LeaseGrant, _Mapping]] = ..., start_now: _Optional[bool] = ...) -> None: ...

class CancelOrder(_message.Message):
    __slots__ = ("run_id", "action")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    action: str
    def __init__(self, run_id: _Optional[str] = ..., action: _Optional[str] = ...) -> None: ...

class LeaseGrant(_message.Message):
    __slots__ = ("renewed", "lost", "lease_seconds")
    RENEWED_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    renewed: _containers.RepeatedCompositeFieldContainer[RunLease]
    lost: _containers.RepeatedCompositeFieldContainer[RunLease]
    lease_seconds: float
    def __init__(self, renewed: _Optional[_Iterable[_Union[RunLease, _Mapping]]] = ..., lost: _Optional[_Iterable[_Union[RunLease, _Mapping]]] = ..., lease_seconds: _Optional[float] = ...) -> None: ...

class BeginRunRequest(_message.Message):
    __slots__ = ("run_id", "epoch")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    epoch: int
    def __init__(self, run_id: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class BeginRunResponse(_message.Message):
    __slots__ = ("started", "reason")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    started: bool
    reason: str
    def __init__(self, started: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("thread_id", "run_id", "action")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    run_id: str
    action: str
    def __init__(self, thread_id: _Optional[str] = ..., run_id: _Optional[str] = ..., action: _Optional[str] = ...) -> None: ...

class CancelRunsRequest(_message.Message):
    __slots__ = ("thread_id", "run_ids", "status", "action")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    run_ids: _containers.RepeatedScalarFieldContainer[str]
    status: str
    action: str
    def __init__(self, thread_id: _Optional[str] = ..., run_ids: _Optional[_Iterable[str]] = ..., status: _Optional[str] = ..., action: _Optional[str] = ...) -> None: ...

class CancelRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_common_pb2.Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[_common_pb2.Run, _Mapping]]] = ...) -> None: ...

class FinishRunResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...

class Cron(_message.Message):
    __slots__ = ("cron_id", "assistant_id", "thread_id", "schedule", "timezone", "end_time", "enabled", "on_run_completed", "payload_json", "metadata_json", "owner_id", "next_run_date", "created_at", "updated_at")
    CRON_ID_FIELD_NUMBER: _ClassVar[int]
    ASSISTANT_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    ON_RUN_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    NEXT_RUN_DATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    cron_id: str
    assistant_id: str
    thread_id: str
    schedule: str
    timezone: str
    end_time: str
    enabled: bool
    on_run_completed: str
    payload_json: bytes
    metadata_json: bytes
    owner_id: str
    next_run_date: str
    created_at: str
    updated_at: str
    def __init__(self, cron_id: _Optional[str] = ..., assistant_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., schedule: _Optional[str] = ..., timezone: _Optional[str] = ..., end_time: _Optional[str] = ..., enabled: _Optional[bool] = ..., on_run_completed: _Optional[str] = ..., payload_json: _Optional[bytes] = ..., metadata_json: _Optional[bytes] = ..., owner_id: _Optional[str] = ..., next_run_date: _Optional[str] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ...) -> None: ...

class CreateCronRequest(_message.Message):
    __slots__ = ("thread_id", "assistant_id", "schedule", "timezone", "end_time", "enabled", "on_run_completed", "kwargs_json", "metadata_json", "multitask_strategy")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ASSISTANT_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    ON_RUN_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    MULTITASK_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    assistant_id: str
    schedule: str
    timezone: str
    end_time: str
    enabled: bool
    on_run_completed: str
    kwargs_json: bytes
    metadata_json: bytes
    multitask_strategy: _common_pb2.MultitaskStrategy
    def __init__(self, thread_id: _Optional[str] = ..., assistant_id: _Optional[str] = ..., schedule: _Optional[str] = ..., timezone: _Optional[str] = ..., end_time: _Optional[str] = ..., enabled: _Optional[bool] = ..., on_run_completed: _Optional[str] = ..., kwargs_json: _Optional[bytes] = ..., metadata_json: _Optional[bytes] = ..., multitask_strategy: _Optional[_Union[_common_pb2.MultitaskStrategy, str]] = ...) -> None: ...

class GetCronRequest(_message.Message):
    __slots__ = ("cron_id",)
    CRON_ID_FIELD_NUMBER: _ClassVar[int]
    cron_id: str
    def __init__(self, cron_id: _Optional[str] = ...) -> None: ...

class PatchCronRequest(_message.Message):
    __slots__ = ("cron_id", "schedule", "timezone", "end_time", "enabled", "on_run_completed", "kwargs_json", "metadata_json")
    CRON_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    ON_RUN_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    cron_id: str
    schedule: str
    timezone: str
    end_time: str
    enabled: bool
    on_run_completed: str
    kwargs_json: bytes
    metadata_json: bytes
    def __init__(self, cron_id: _Optional[str] = ..., schedule: _Optional[str] = ..., timezone: _Optional[str] = ..., end_time: _Optional[str] = ..., enabled: _Optional[bool] = ..., on_run_completed: _Optional[str] = ..., kwargs_json: _Optional[bytes] = ..., metadata_json: _Optional[bytes] = ...) -> None: ...

class DeleteCronResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SearchCronsRequest(_message.Message):
    __slots__ = ("assistant_id", "thread_id", "enabled", "metadata_json", "limit", "offset", "sort_by", "sort_order")
    ASSISTANT_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    SORT_BY_FIELD_NUMBER: _ClassVar[int]
    SORT_ORDER_FIELD_NUMBER: _ClassVar[int]
    assistant_id: str
    thread_id: str
    enabled: bool
    metadata_json: bytes
    limit: int
    offset: int
    sort_by: str
    sort_order: str
    def __init__(self, assistant_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., enabled: _Optional[bool] = ..., metadata_json: _Optional[bytes] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., sort_by: _Optional[str] = ..., sort_order: _Optional[str] = ...) -> None: ...

class SearchCronsResponse(_message.Message):
    __slots__ = ("crons",)
    CRONS_FIELD_NUMBER: _ClassVar[int]
    crons: _containers.RepeatedCompositeFieldContainer[Cron]
    def __init__(self, crons: _Optional[_Iterable[_Union[Cron, _Mapping]]] = ...) -> None: ...

class CountCronsResponse(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...
