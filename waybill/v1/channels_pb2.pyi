from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ChannelCheckRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ChannelCheck(_message.Message):
    __slots__ = ("channel", "platform", "ok", "detail")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    channel: str
    platform: str
    ok: bool
    detail: str
    def __init__(self, channel: _Optional[str] = ..., platform: _Optional[str] = ..., ok: _Optional[bool] = ..., detail: _Optional[str] = ...) -> None: ...

class ChannelCheckReply(_message.Message):
    __slots__ = ("channels",)
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    channels: _containers.RepeatedCompositeFieldContainer[ChannelCheck]
    def __init__(self, channels: _Optional[_Iterable[_Union[ChannelCheck, _Mapping]]] = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class InboundDelivery(_message.Message):
    __slots__ = ("platform", "channel", "body", "headers", "method", "query")
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    platform: str
    channel: str
    body: bytes
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    method: str
    query: str
    def __init__(self, platform: _Optional[str] = ..., channel: _Optional[str] = ..., body: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., method: _Optional[str] = ..., query: _Optional[str] = ...) -> None: ...

class InboundReply(_message.Message):
    __slots__ = ("http_status", "body_json", "content_type")
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    BODY_JSON_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    http_status: int
    body_json: bytes
    content_type: str
    def __init__(self, http_status: _Optional[int] = ..., body_json: _Optional[bytes] = ..., content_type: _Optional[str] = ...) -> None: ...
