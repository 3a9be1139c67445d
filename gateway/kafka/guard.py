"""A length check run before kio decodes a request: no array may claim more items than bytes remain,
and no field the schema does not let be null is null.

kio's native reader sizes an array's storage from the length on the wire before reading the items,
so a 40-byte request claiming four billion items makes it ask for 32 GB, and the process aborts.
This skims the request along kio's own schema (no objects built, strings and bytes skipped by
their lengths) and refuses any array longer than the bytes left after it. Each item takes at least
one byte, so a real request always passes. A null (length -1) where the schema has no null is
refused as Kafka's generated readers refuse it ("non-nullable field ... was serialized as null"):
kio would hand the handler a None it never expects.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields
from functools import cache
from typing import Any

from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional

from gateway.formats.varint import VarintError, read_uvarint
from gateway.kafka.errors import MalformedRequest

Skim = Callable[[bytes | memoryview, int], int]  # (buffer, offset) -> offset after the value

_FIXED = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def check_request(cls: type, buf: bytes | memoryview, offset: int) -> None:  # `type`: mypy finds type[Any] unhashable
    """Raise MalformedRequest when the body at `offset` claims more than it holds."""
    try:
        _entity(cls)[0](buf, offset)
    except (IndexError, struct.error, VarintError) as exc:
        raise MalformedRequest(f"request body ends early: {exc}") from exc


def _length(buf: bytes | memoryview, pos: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """A length prefix (-1 for null): compact uvarint, or int16 (strings) / int32 (bytes, arrays)."""
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    if wide:
        return _I32.unpack_from(buf, pos)[0], pos + 4
    return _I16.unpack_from(buf, pos)[0], pos + 2


def _not_null(name: str) -> None:
    raise MalformedRequest(f"non-nullable field {name} was serialized as null")


def _sized(flexible: bool, wide: bool, nullable: bool, name: str) -> Skim:
    def skim(buf: bytes | memoryview, pos: int) -> int:
        n, pos = _length(buf, pos, flexible, wide)
        if n < 0 and not nullable:
            _not_null(name)
        end = pos + max(n, 0)
        if end > len(buf):
            raise MalformedRequest("a string or bytes field runs past the request")
        return end

    return skim


def _fixed(size: int) -> Skim:
    def skim(buf: bytes | memoryview, pos: int) -> int:
        if pos + size > len(buf):
            raise MalformedRequest("request body ends early")
        return pos + size

    return skim


def _array(item: Skim, flexible: bool, nullable: bool, name: str, item_size: int | None = None) -> Skim:
    """An array; items of one fixed size are skipped in one step (Fetch's partitions, for one)."""

    def skim(buf: bytes | memoryview, pos: int) -> int:
        n, pos = _length(buf, pos, flexible, True)
        if n < 0 and not nullable:
            _not_null(name)
        if n > len(buf) - pos:
            raise MalformedRequest(f"an array claims {n} items with {len(buf) - pos} bytes left")
        if item_size is not None:
            end = pos + max(n, 0) * item_size
            if end > len(buf):
                raise MalformedRequest("an array runs past the request")
            return end
        for _ in range(n):
            pos = item(buf, pos)
        return pos

    return skim


def _nullable(inner: Skim) -> Skim:
    def skim(buf: bytes | memoryview, pos: int) -> int:
        marker = buf[pos]
        return pos + 1 if marker == 0xFF else inner(buf, pos + 1)

    return skim


def _primitive(kind: str, flexible: bool, nullable: bool, name: str) -> Skim:
    if kind in _FIXED:
        return _fixed(_FIXED[kind])
    if kind == "string":
        return _sized(flexible, False, nullable, name)
    if kind in ("bytes", "records"):
        return _sized(flexible, True, nullable, name)
    raise MalformedRequest(f"no length check for kafka type {kind!r}")


def _field(f: Any, flexible: bool) -> tuple[Skim, int | None]:
    """The skim of one field, and its size when that is fixed."""
    shape = classify_field(f)
    nullable = is_optional(f)
    if isinstance(shape, EntityTupleField):
        inner, size = _entity(shape.type_)
        return _array(inner, flexible, nullable, f.name, size), None
    if isinstance(shape, EntityField):
        inner, size = _entity(shape.type_)
        return (_nullable(inner), None) if nullable else (inner, size)
    kind = f.metadata["kafka_type"]
    if shape.is_array:  # the array may be null, never its items
        return _array(_primitive(kind, flexible, False, f.name), flexible, nullable, f.name, _FIXED.get(kind)), None
    return _primitive(kind, flexible, nullable, f.name), _FIXED.get(kind)


@cache
def _entity(cls: type[Any]) -> tuple[Skim, int | None]:
    """The skim of an entity, and its size when every field is fixed (never for flexible ones)."""
    flexible = bool(cls.__flexible__)
    plain: list[Skim] = []
    tagged: dict[int, Skim] = {}
    run = 0  # bytes of consecutive fixed fields, skipped in one step
    total: int | None = 0
    for f in fields(cls):
        tag = f.metadata.get("tag")
        step, size = _field(f, flexible)
        if tag is not None:
            tagged[tag] = step
        elif size is not None:
            run += size
            total = None if total is None else total + size
        else:
            if run:
                plain.append(_fixed(run))
                run = 0
            plain.append(step)
            total = None
    if run:
        plain.append(_fixed(run))

    def skim(buf: bytes | memoryview, pos: int) -> int:
        for step in plain:
            pos = step(buf, pos)
        if not flexible:
            return pos
        count, pos = read_uvarint(buf, pos)
        if count > len(buf) - pos:
            raise MalformedRequest("more tagged fields than bytes")
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            end = pos + size
            if end > len(buf):
                raise MalformedRequest("a tagged field runs past the request")
            known = tagged.get(tag)
            if known is not None:
                known(memoryview(buf)[:end], pos)  # its content may hold arrays too
            pos = end
        return pos

    return skim, None if flexible else total
