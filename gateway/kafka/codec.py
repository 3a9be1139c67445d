"""The Kafka wire codec: request headers, kio decoding, response framing, and version-proof builders.

A frame is a 4-byte size and a body; the body starts with api key, api version, correlation id
(the first 8 bytes pick the kio class), then the client id and, for flexible versions, tagged
fields. Nothing here does I/O.
"""

from __future__ import annotations

import datetime
import io
import struct
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from functools import cache
from typing import Any, NamedTuple

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KafkaError
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional

from gateway.formats.varint import VarintError, read_uvarint
from gateway.kafka import guard, streams_schema
from gateway.kafka.errors import MalformedRequest
from gateway.kafka.produce_request import MAX_VERSION as PRODUCE_MAX
from gateway.kafka.produce_request import MIN_VERSION as PRODUCE_MIN
from gateway.kafka.produce_request import decode_produce_request

_HEAD = struct.Struct(">hhi")
_I32 = struct.Struct(">i")


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the request body starts in the frame


@cache
def request_class(api_key: int, version: int) -> type[Any] | None:
    """kio's request class for key and version (or ours, where kio lacks it: `streams_schema`), or
    None when the protocol has none."""
    try:
        return load_request_schema(api_key, version)
    except (KioIndexError, ImportError, AttributeError):
        return streams_schema.REQUESTS.get((api_key, version))


@cache
def find_response_class(api_key: int, version: int) -> type[Any] | None:
    """kio's response class for key and version (or ours, where kio lacks it), or None when the
    protocol has none."""
    try:
        return load_response_schema(api_key, version)
    except (KioIndexError, ImportError, AttributeError):
        return streams_schema.RESPONSES.get((api_key, version))


def response_class(api_key: int, version: int) -> type[Any]:
    """kio's response class of a registered handler's key and version (registration checked it exists)."""
    cls = find_response_class(api_key, version)
    if cls is None:
        raise LookupError(f"kio has no response for api {api_key} v{version}")
    return cls


def response_header_flexible(api_key: int, version: int) -> bool:
    """Whether the response header carries tagged fields (ApiVersions never does: clients parse it blind)."""
    cls = find_response_class(api_key, version)
    return cls is not None and bool(cls.__header_schema__.__flexible__)


def read_header(frame: bytes | memoryview) -> RequestHeader:
    """The request header; tagged header fields of flexible versions are skipped."""
    if len(frame) < 10:
        raise MalformedRequest("request shorter than its header")
    api_key, version, correlation_id = _HEAD.unpack_from(frame, 0)
    (n,) = struct.unpack_from(">h", frame, 8)
    pos = 10
    client_id: str | None = None
    if n >= 0:
        if pos + n > len(frame):
            raise MalformedRequest("client id runs past the frame")
        client_id = bytes(frame[pos : pos + n]).decode("utf-8", "replace")
        pos += n
    cls = request_class(api_key, version)
    if cls is not None and cls.__header_schema__.__flexible__:
        try:
            count, pos = read_uvarint(frame, pos)
            for _ in range(count):
                _, pos = read_uvarint(frame, pos)  # tag
                size, pos = read_uvarint(frame, pos)
                pos += size
        except VarintError as exc:
            raise MalformedRequest(str(exc)) from exc
        if pos > len(frame):
            raise MalformedRequest("tagged header fields run past the frame")
    return RequestHeader(api_key, version, correlation_id, client_id, pos)


def decode_request(frame: bytes | memoryview, header: RequestHeader) -> Any:
    """The kio request object; trailing bytes after it are ignored (some clients send them).
    Produce, the hot path, is read by hand with its records left in the frame (`produce_request`)."""
    if header.api_key == 0 and PRODUCE_MIN <= header.api_version <= PRODUCE_MAX:
        return decode_produce_request(frame, header.api_version, header.body_offset)
    cls = request_class(header.api_key, header.api_version)
    if cls is None:
        raise MalformedRequest(f"no schema for api {header.api_key} v{header.api_version}")
    guard.check_request(cls, frame, header.body_offset)  # kio would abort the process on a lying length
    try:
        request, _ = entity_reader(cls)(frame, header.body_offset)
    except Exception as exc:  # kio's native reader raises several types on bad input
        raise MalformedRequest(f"cannot decode api {header.api_key} v{header.api_version}: {exc}") from exc
    return request


# -- responses ------------------------------------------------------------------------------------


def frame_response(correlation_id: int, flexible_header: bool, body: list[bytes | memoryview]) -> list[bytes | memoryview]:
    """Size prefix and response header in front of body chunks, ready for `writelines`."""
    head = _I32.pack(correlation_id) + (b"\x00" if flexible_header else b"")
    size = len(head) + sum(len(c) for c in body)
    return [_I32.pack(size) + head, *body]


def encode_body(response: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(response))(buf, response)
    return buf.getvalue()


# -- building kio entities from plain values ------------------------------------------------------


def build(cls: type[Any], values: Mapping[str, Any] | None = None, *, error: KafkaError | None = None) -> Any:
    """A kio entity of `cls` from a mapping, whatever the version.

    Keys the version lacks are dropped; fields not given keep kio's default or get a zero value;
    nested entities and arrays of them may be given as mappings. With `error`, every error_code
    field not given is set to it (for whole-request error responses).
    """
    values = values or {}
    kwargs: dict[str, Any] = {}
    for f in _plan(cls):
        if f.name in values:
            kwargs[f.name] = _convert(f, values[f.name], error)
        elif error is not None and f.kind == "error_code":
            kwargs[f.name] = error
        elif not f.has_default:
            kwargs[f.name] = _zero(f.field, error)
    return cls(**kwargs)


class _Field(NamedTuple):
    """What `build` needs of a field of a kio entity, worked out once per class: kio's field
    introspection took more time than the rest of a response's building (several µs a field)."""

    name: str
    kind: str | None  # kio's kafka_type
    nested: type[Any] | None  # the entity class of an entity field or an array of them
    many: bool  # an array of entities
    has_default: bool
    field: Any


_PLANS: dict[type[Any], tuple[_Field, ...]] = {}


def _plan(cls: type[Any]) -> tuple[_Field, ...]:
    plan = _PLANS.get(cls)
    if plan is not None:
        return plan
    out = []
    for f in fields(cls):
        shape = classify_field(f)
        nested = shape.type_ if isinstance(shape, EntityTupleField | EntityField) else None
        out.append(_Field(f.name, f.metadata.get("kafka_type"), nested, isinstance(shape, EntityTupleField),
                          f.default is not MISSING or f.default_factory is not MISSING, f))
    plan = _PLANS[cls] = tuple(out)
    return plan


def _convert(f: _Field, value: Any, error: KafkaError | None) -> Any:
    if value is None:
        return None
    if f.nested is not None:
        if f.many:
            return tuple(v if is_dataclass(v) else build(f.nested, v, error=error) for v in value)
        return value if is_dataclass(value) else build(f.nested, value, error=error)
    kind = f.kind
    if kind in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kind == "error_code" and not isinstance(value, KafkaError):
        return KafkaError(int(value))
    if isinstance(value, list):
        return tuple(value)
    return value


def _zero(f: Any, error: KafkaError | None) -> Any:
    shape = classify_field(f)
    if shape.is_array:
        return ()
    if is_optional(f):
        return None
    if isinstance(shape, EntityField):
        return build(shape.type_, error=error)
    kind = f.metadata.get("kafka_type", "")
    if kind == "error_code":
        return error if error is not None else KafkaError.none
    if kind == "string":
        return ""
    if kind in ("bytes", "records"):
        return b""
    if kind == "bool":
        return False
    if kind in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kind == "float64":
        return 0.0
    return 0


def error_response(api_key: int, version: int, error: KafkaError) -> list[bytes | memoryview] | None:
    """The body of a response carrying `error` everywhere, or None when kio has no such response."""
    cls = find_response_class(api_key, version)
    if cls is None:
        return None
    return [encode_body(build(cls, error=error))]


# -- the error codes a response carries, for the request metrics ----------------------------------


def response_errors(response: Any) -> set[KafkaError]:
    """Every error code other than none anywhere in a kio response (top level, topics, partitions)."""
    out: set[KafkaError] = set()
    _collect_errors(response, out)
    out.discard(KafkaError.none)
    return out


def _collect_errors(entity: Any, out: set[KafkaError]) -> None:
    cls = type(entity)
    plan = _ERROR_FIELDS.get(cls)
    if plan is None:
        plan = _ERROR_FIELDS[cls] = _error_fields(cls)
    codes, nested = plan
    for name in codes:
        out.add(getattr(entity, name))
    for name, many in nested:
        value = getattr(entity, name)
        if value is None:
            continue
        for child in value if many else (value,):
            _collect_errors(child, out)


_ErrorFields = tuple[tuple[str, ...], tuple[tuple[str, bool], ...]]
_ERROR_FIELDS: dict[type[Any], _ErrorFields] = {}


def _error_fields(cls: type[Any]) -> _ErrorFields:
    """The error-code fields of an entity class, and its entity fields (with whether each is an array)."""
    codes: list[str] = []
    nested: list[tuple[str, bool]] = []
    for f in fields(cls):
        if f.metadata.get("kafka_type") == "error_code":
            codes.append(f.name)
            continue
        shape = classify_field(f)
        if isinstance(shape, EntityTupleField | EntityField):
            nested.append((f.name, isinstance(shape, EntityTupleField)))
    return tuple(codes), tuple(nested)
