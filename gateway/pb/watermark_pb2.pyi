# Generated from proto/watermark.proto; do not edit. Regenerate: proto/generate.sh
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WatermarkMark(_message.Message):
    __slots__ = ("producer", "event_time_ms", "written_ms")
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_MS_FIELD_NUMBER: _ClassVar[int]
    producer: str
    event_time_ms: int
    written_ms: int
    def __init__(self, producer: _Optional[str] = ..., event_time_ms: _Optional[int] = ..., written_ms: _Optional[int] = ...) -> None: ...

class ProducerWatermark(_message.Message):
    __slots__ = ("producer", "event_time_ms", "offset", "written_ms")
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_MS_FIELD_NUMBER: _ClassVar[int]
    producer: str
    event_time_ms: int
    offset: int
    written_ms: int
    def __init__(self, producer: _Optional[str] = ..., event_time_ms: _Optional[int] = ..., offset: _Optional[int] = ..., written_ms: _Optional[int] = ...) -> None: ...

class WatermarkSnapshot(_message.Message):
    __slots__ = ("offset", "producers", "pending")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    offset: int
    producers: _containers.RepeatedCompositeFieldContainer[ProducerWatermark]
    pending: _containers.RepeatedCompositeFieldContainer[ProducerWatermark]
    def __init__(self, offset: _Optional[int] = ..., producers: _Optional[_Iterable[_Union[ProducerWatermark, _Mapping]]] = ..., pending: _Optional[_Iterable[_Union[ProducerWatermark, _Mapping]]] = ...) -> None: ...
