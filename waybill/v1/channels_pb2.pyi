from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Header(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class InboundDelivery(_message.Message):
    __slots__ = ("platform", "channel", "body", "headers")
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    platform: str
    channel: str
    body: bytes
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    def __init__(self, platform: _Optional[str] = ..., channel: _Optional[str] = ..., body: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ...) -> None: ...

class InboundReply(_message.Message):
    __slots__ = ("http_status", "body_json")
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    BODY_JSON_FIELD_NUMBER: _ClassVar[int]
    http_status: int
    body_json: bytes
    def __init__(self, http_status: _Optional[int] = ..., body_json: _Optional[bytes] = ...) -> None: ...
