from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class GetThreadStateRequest(_message.Message):
    __slots__ = ("thread_id", "graph_id", "subgraphs")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    SUBGRAPHS_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    graph_id: str
    subgraphs: bool
    def __init__(self, thread_id: _Optional[str] = ..., graph_id: _Optional[str] = ..., subgraphs: _Optional[bool] = ...) -> None: ...

class GetThreadHistoryRequest(_message.Message):
    __slots__ = ("thread_id", "graph_id", "limit", "filter_json", "before")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    FILTER_JSON_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    graph_id: str
    limit: int
    filter_json: bytes
    before: str
    def __init__(self, thread_id: _Optional[str] = ..., graph_id: _Optional[str] = ..., limit: _Optional[int] = ..., filter_json: _Optional[bytes] = ..., before: _Optional[str] = ...) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetGraphRequest(_message.Message):
    __slots__ = ("graph_id", "xray")
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    XRAY_FIELD_NUMBER: _ClassVar[int]
    graph_id: str
    xray: bool
    def __init__(self, graph_id: _Optional[str] = ..., xray: _Optional[bool] = ...) -> None: ...

class GetSchemasRequest(_message.Message):
    __slots__ = ("graph_id",)
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    graph_id: str
    def __init__(self, graph_id: _Optional[str] = ...) -> None: ...

class JsonReply(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: bytes
    def __init__(self, json: _Optional[bytes] = ...) -> None: ...
