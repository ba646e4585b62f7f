from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetThreadStateRequest(_message.Message):
    __slots__ = ("thread_id", "graph_id", "subgraphs", "checkpoint_id", "checkpoint_ns", "checkpoint_map")
    class CheckpointMapEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    SUBGRAPHS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_MAP_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    graph_id: str
    subgraphs: bool
    checkpoint_id: str
    checkpoint_ns: str
    checkpoint_map: _containers.ScalarMap[str, str]
    def __init__(self, thread_id: _Optional[str] = ..., graph_id: _Optional[str] = ..., subgraphs: _Optional[bool] = ..., checkpoint_id: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ..., checkpoint_map: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateThreadStateRequest(_message.Message):
    __slots__ = ("thread_id", "graph_id", "values_json", "as_node", "checkpoint_id", "checkpoint_ns", "checkpoint_map")
    class CheckpointMapEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    VALUES_JSON_FIELD_NUMBER: _ClassVar[int]
    AS_NODE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_MAP_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    graph_id: str
    values_json: bytes
    as_node: str
    checkpoint_id: str
    checkpoint_ns: str
    checkpoint_map: _containers.ScalarMap[str, str]
    def __init__(self, thread_id: _Optional[str] = ..., graph_id: _Optional[str] = ..., values_json: _Optional[bytes] = ..., as_node: _Optional[str] = ..., checkpoint_id: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ..., checkpoint_map: _Optional[_Mapping[str, str]] = ...) -> None: ...

class BulkUpdateThreadStateRequest(_message.Message):
    __slots__ = ("thread_id", "graph_id", "supersteps_json")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    SUPERSTEPS_JSON_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    graph_id: str
    supersteps_json: bytes
    def __init__(self, thread_id: _Optional[str] = ..., graph_id: _Optional[str] = ..., supersteps_json: _Optional[bytes] = ...) -> None: ...

class PruneThreadStateRequest(_message.Message):
    __slots__ = ("thread_id",)
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    def __init__(self, thread_id: _Optional[str] = ...) -> None: ...

class DeleteThreadStateRequest(_message.Message):
    __slots__ = ("thread_id",)
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    def __init__(self, thread_id: _Optional[str] = ...) -> None: ...

class CopyThreadStateRequest(_message.Message):
    __slots__ = ("source_thread_id", "target_thread_id")
    SOURCE_THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    source_thread_id: str
    target_thread_id: str
    def __init__(self, source_thread_id: _Optional[str] = ..., target_thread_id: _Optional[str] = ...) -> None: ...

class StoreKey(_message.Message):
    __slots__ = ("namespace", "key", "refresh_ttl")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    REFRESH_TTL_FIELD_NUMBER: _ClassVar[int]
    namespace: _containers.RepeatedScalarFieldContainer[str]
    key: str
    refresh_ttl: bool
    def __init__(self, namespace: _Optional[_Iterable[str]] = ..., key: _Optional[str] = ..., refresh_ttl: _Optional[bool] = ...) -> None: ...

class StorePutRequest(_message.Message):
    __slots__ = ("item", "value_json", "index_json", "ttl_minutes")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    INDEX_JSON_FIELD_NUMBER: _ClassVar[int]
    TTL_MINUTES_FIELD_NUMBER: _ClassVar[int]
    item: StoreKey
    value_json: bytes
    index_json: bytes
    ttl_minutes: float
    def __init__(self, item: _Optional[_Union[StoreKey, _Mapping]] = ..., value_json: _Optional[bytes] = ..., index_json: _Optional[bytes] = ..., ttl_minutes: _Optional[float] = ...) -> None: ...

class StoreSearchRequest(_message.Message):
    __slots__ = ("namespace_prefix", "filter_json", "limit", "offset", "query", "refresh_ttl")
    NAMESPACE_PREFIX_FIELD_NUMBER: _ClassVar[int]
    FILTER_JSON_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    REFRESH_TTL_FIELD_NUMBER: _ClassVar[int]
    namespace_prefix: _containers.RepeatedScalarFieldContainer[str]
    filter_json: bytes
    limit: int
    offset: int
    query: str
    refresh_ttl: bool
    def __init__(self, namespace_prefix: _Optional[_Iterable[str]] = ..., filter_json: _Optional[bytes] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., query: _Optional[str] = ..., refresh_ttl: _Optional[bool] = ...) -> None: ...

class StoreListNamespacesRequest(_message.Message):
    __slots__ = ("prefix", "suffix", "max_depth", "limit", "offset")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    SUFFIX_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    prefix: _containers.RepeatedScalarFieldContainer[str]
    suffix: _containers.RepeatedScalarFieldContainer[str]
    max_depth: int
    limit: int
    offset: int
    def __init__(self, prefix: _Optional[_Iterable[str]] = ..., suffix: _Optional[_Iterable[str]] = ..., max_depth: _Optional[int] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class GetThreadHistoryRequest(_message.Message):
    __slots__ = ("thread_id", "graph_id", "limit", "filter_json", "before", "checkpoint_ns", "checkpoint_map", "checkpoint_id")
    class CheckpointMapEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    FILTER_JSON_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_MAP_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    graph_id: str
    limit: int
    filter_json: bytes
    before: str
    checkpoint_ns: str
    checkpoint_map: _containers.ScalarMap[str, str]
    checkpoint_id: str
    def __init__(self, thread_id: _Optional[str] = ..., graph_id: _Optional[str] = ..., limit: _Optional[int] = ..., filter_json: _Optional[bytes] = ..., before: _Optional[str] = ..., checkpoint_ns: _Optional[str] = ..., checkpoint_map: _Optional[_Mapping[str, str]] = ..., checkpoint_id: _Optional[str] = ...) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetGraphRequest(_message.Message):
    __slots__ = ("graph_id", "xray", "xray_depth", "config_json")
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    XRAY_FIELD_NUMBER: _ClassVar[int]
    XRAY_DEPTH_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    graph_id: str
    xray: bool
    xray_depth: int
    config_json: bytes
    def __init__(self, graph_id: _Optional[str] = ..., xray: _Optional[bool] = ..., xray_depth: _Optional[int] = ..., config_json: _Optional[bytes] = ...) -> None: ...

class GetSchemasRequest(_message.Message):
    __slots__ = ("graph_id", "config_json")
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    graph_id: str
    config_json: bytes
    def __init__(self, graph_id: _Optional[str] = ..., config_json: _Optional[bytes] = ...) -> None: ...

class GetSubgraphsRequest(_message.Message):
    __slots__ = ("graph_id", "namespace", "recurse", "config_json")
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RECURSE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    graph_id: str
    namespace: str
    recurse: bool
    config_json: bytes
    def __init__(self, graph_id: _Optional[str] = ..., namespace: _Optional[str] = ..., recurse: _Optional[bool] = ..., config_json: _Optional[bytes] = ...) -> None: ...

class ListMemoryRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MemoryFact(_message.Message):
    __slots__ = ("fact_id", "fact", "thread_id", "run_id", "created_at", "updated_at")
    FACT_ID_FIELD_NUMBER: _ClassVar[int]
    FACT_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    fact_id: str
    fact: str
    thread_id: str
    run_id: str
    created_at: str
    updated_at: str
    def __init__(self, fact_id: _Optional[str] = ..., fact: _Optional[str] = ..., thread_id: _Optional[str] = ..., run_id: _Optional[str] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ...) -> None: ...

class MemoryFacts(_message.Message):
    __slots__ = ("facts",)
    FACTS_FIELD_NUMBER: _ClassVar[int]
    facts: _containers.RepeatedCompositeFieldContainer[MemoryFact]
    def __init__(self, facts: _Optional[_Iterable[_Union[MemoryFact, _Mapping]]] = ...) -> None: ...

class PutMemoryRequest(_message.Message):
    __slots__ = ("fact_id", "fact")
    FACT_ID_FIELD_NUMBER: _ClassVar[int]
    FACT_FIELD_NUMBER: _ClassVar[int]
    fact_id: str
    fact: str
    def __init__(self, fact_id: _Optional[str] = ..., fact: _Optional[str] = ...) -> None: ...

class DeleteMemoryRequest(_message.Message):
    __slots__ = ("fact_id",)
    FACT_ID_FIELD_NUMBER: _ClassVar[int]
    fact_id: str
    def __init__(self, fact_id: _Optional[str] = ...) -> None: ...

class DeleteMemoryResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JsonReply(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: bytes
    def __init__(self, json: _Optional[bytes] = ...) -> None: ...
