"""Framing of the native protocol, shared by the server and the client.

A frame is a 4-byte big-endian length and one protobuf message. The frames on the hot paths,
`Messages` and `RangeRead`, are encoded here by hand as lists of chunks so stored batch bytes go to
the socket through `writelines` without being copied into a serialized message; their bytes equal
protobuf's.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterable
from typing import NamedTuple

from google.protobuf.message import Message as ProtoMessage

from gateway.errors import InvalidRequest, MessageTooLarge
from gateway.formats.varint import uvarint

PROTOCOL_VERSION = 1
_LENGTH = struct.Struct(">I")


class FrameTooLarge(MessageTooLarge):
    """A peer announced a frame over the limit: the stream cannot be trusted past it."""


async def read_frame(reader: asyncio.StreamReader, max_bytes: int) -> bytes:
    """The next frame's payload; IncompleteReadError at a clean end of stream."""
    (n,) = _LENGTH.unpack(await reader.readexactly(4))
    if n > max_bytes:
        raise FrameTooLarge(f"frame of {n} bytes over the limit of {max_bytes}")
    return await reader.readexactly(n)


def frame(message: ProtoMessage) -> bytes:
    body = message.SerializeToString()
    return _LENGTH.pack(len(body)) + body


# -- hand-written encoder for Response{messages} -----------------------------------------------


def _tag(field: int, wire_type: int) -> bytes:
    return uvarint(field << 3 | wire_type)


_VARINT, _LEN = 0, 2
_RESPONSE_ID = _tag(1, _VARINT)
_RESPONSE_MESSAGES = _tag(20, _LEN)
_RESPONSE_RANGE = _tag(41, _LEN)
_MESSAGES_CONSUMER = _tag(1, _VARINT)
_MESSAGES_ENTRY = _tag(2, _LEN)
_RANGE_ENTRY = _tag(1, _LEN)
_RANGE_NEXT = _tag(2, _VARINT)
_RANGE_STABLE = _tag(3, _VARINT)
_ENTRY_PARTITION = _tag(1, _VARINT)
_ENTRY_BASE = _tag(2, _VARINT)
_ENTRY_BATCH = _tag(3, _LEN)
_ENTRY_SKIP = _tag(4, _LEN)
_ENTRY_REDELIVERY = _tag(5, _VARINT)


class OutgoingEntry(NamedTuple):
    partition: int
    base_offset: int
    batch: bytes | memoryview
    skip: Iterable[int] = ()
    redelivery_count: int = 0


def _entries(field_tag: bytes, entries: Iterable[OutgoingEntry], chunks: list[bytes | memoryview]) -> int:
    """Append each entry as an `EntryBatch` field to `chunks`, its batch bytes uncopied; returns
    the bytes added."""
    added = 0
    for e in entries:
        pre = bytearray()
        if e.partition:
            pre += _ENTRY_PARTITION + uvarint(e.partition)
        if e.base_offset:
            pre += _ENTRY_BASE + uvarint(e.base_offset)
        if len(e.batch):
            pre += _ENTRY_BATCH + uvarint(len(e.batch))
        post = bytearray()
        packed = b"".join(uvarint(s) for s in e.skip)
        if packed:
            post += _ENTRY_SKIP + uvarint(len(packed)) + packed
        if e.redelivery_count:
            post += _ENTRY_REDELIVERY + uvarint(e.redelivery_count)
        size = len(pre) + len(e.batch) + len(post)
        head = field_tag + uvarint(size) + pre
        chunks += [head, e.batch, bytes(post)]
        added += len(head) + len(e.batch) + len(post)
    return added


def _response(request_id: int, body_tag: bytes, chunks: list[bytes | memoryview], body_len: int) -> list[bytes | memoryview]:
    head = (_RESPONSE_ID + uvarint(request_id) if request_id else b"") + body_tag + uvarint(body_len)
    return [_LENGTH.pack(len(head) + body_len), head, *chunks]


def messages_frame(consumer_id: int, entries: Iterable[OutgoingEntry]) -> list[bytes | memoryview]:
    """Chunks of one length-prefixed `Response{messages}`, byte for byte what protobuf would write."""
    chunks: list[bytes | memoryview] = []
    body_len = 0
    if consumer_id:
        head = _MESSAGES_CONSUMER + uvarint(consumer_id)
        chunks.append(head)
        body_len += len(head)
    body_len += _entries(_MESSAGES_ENTRY, entries, chunks)
    return _response(0, _RESPONSE_MESSAGES, chunks, body_len)


def range_frame(
    request_id: int, entries: Iterable[OutgoingEntry], next_offset: int, last_stable_offset: int
) -> list[bytes | memoryview]:
    """Chunks of one length-prefixed `Response{range_read}`, byte for byte what protobuf would write."""
    chunks: list[bytes | memoryview] = []
    body_len = _entries(_RANGE_ENTRY, entries, chunks)
    tail = bytearray()
    if next_offset:
        tail += _RANGE_NEXT + uvarint(next_offset)
    if last_stable_offset:
        tail += _RANGE_STABLE + uvarint(last_stable_offset)
    chunks.append(bytes(tail))
    return _response(request_id, _RESPONSE_RANGE, chunks, body_len + len(tail))


def parse(message: ProtoMessage, payload: bytes) -> ProtoMessage:
    """`payload` decoded into `message`; malformed bytes become InvalidRequest."""
    try:
        message.ParseFromString(payload)
    except Exception as exc:  # protobuf's DecodeError, or worse from a hostile peer
        raise InvalidRequest(f"malformed frame: {exc}") from exc
    return message
