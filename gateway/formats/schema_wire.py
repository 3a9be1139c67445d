"""Confluent's Schema Registry wire format, the one copy: a value serialized against a registered
schema is magic byte 0, the schema id as 4 bytes big-endian, then for Protobuf the message indexes
(which message of the .proto file), then the Avro binary, JSON text or Protobuf bytes.

As confluent-kafka's serializers write it (`schema_registry/common/serde.py`, `SchemaId.id_to_bytes`
and `_encode_varints`: the indexes as zigzag varints, a count first, and the first message of the
file, `[0]`, as the single byte 0; `_read_index_array` reads a count of 0 back as `[0]`).
"""

from __future__ import annotations

import struct

from gateway.errors import CorruptMessage
from gateway.formats.varint import read_varint, write_varint

MAGIC = 0
_HEADER = struct.Struct(">bI")
_MAX_INDEXES = 100_000  # confluent-kafka's bound on a message-index array


class WireFormatError(CorruptMessage):
    """Bytes that are not a value in Confluent's wire format."""


def header(schema_id: int, message_indexes: list[int] | None = None) -> bytes:
    """What goes before the payload: magic, id, and for Protobuf the message indexes."""
    out = bytearray(_HEADER.pack(MAGIC, schema_id))
    if message_indexes is not None:
        if message_indexes == [0]:
            out.append(0)
        else:
            write_varint(out, len(message_indexes))
            for i in message_indexes:
                write_varint(out, i)
    return bytes(out)


def schema_id_of(data: bytes) -> tuple[int, int]:
    """(schema id, position of what follows the header's 5 bytes)."""
    if len(data) < _HEADER.size:
        raise WireFormatError(f"{len(data)} bytes are too short for Confluent's wire format (magic byte and id)")
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise WireFormatError(f"unknown magic byte {magic}: not Confluent's wire format")
    return schema_id, _HEADER.size


def message_indexes_of(data: bytes, pos: int) -> tuple[list[int], int]:
    """A Protobuf value's message indexes at `pos`: (indexes, position of the message bytes)."""
    try:
        count, pos = read_varint(data, pos)
        if not 0 <= count <= _MAX_INDEXES:
            raise WireFormatError(f"invalid message-index count {count}")
        if count == 0:
            return [0], pos
        out = []
        for _ in range(count):
            i, pos = read_varint(data, pos)
            out.append(i)
    except CorruptMessage as exc:
        raise WireFormatError(f"truncated message indexes: {exc}") from None
    return out, pos
