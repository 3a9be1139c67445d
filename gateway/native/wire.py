"""Framing of the native protocol, shared by the server and the client.

A frame is a 4-byte big-endian length and one protobuf message. The one frame on the hot path,
`Messages`, is encoded here by hand as a list of chunks so stored batch bytes go to the socket
through `writelines` without being copied into a serialized message; its bytes equal protobuf's.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterable
from typing import NamedTuple

from google.protobuf.message import Message as ProtoMessage

from gateway.errors import InvalidRequest, MessageTooLarge

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


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


_VARINT, _LEN = 0, 2
_RESPONSE_MESSAGES = _tag(20, _LEN)
_MESSAGES_CONSUMER = _tag(1, _VARINT)
_MESSAGES_ENTRY = _tag(2, _LEN)
_ENTRY_PARTITION = _tag(1, _VARINT)
_ENTRY_BASE = _tag(2, _VARINT)
_ENTRY_BATCH = _tag(3, _LEN)
_ENTRY_SKIP = _tag(4, _LEN)
_ENTRY_REDELIVERY = _tag(5, _VARINT)


class OutgoingEntry(NamedTuple):
    partition: int
    base_offset: int
    batch: bytes | memoryview
    skip: Iterable[int]
    redelivery_count: int


def messages_frame(consumer_id: int, entries: Iterable[OutgoingEntry]) -> list[bytes | memoryview]:
    """Chunks of one length-prefixed `Response{messages}`, byte for byte what protobuf would write."""
    chunks: list[bytes | memoryview] = []
    body_len = 0
    if consumer_id:
        head = _MESSAGES_CONSUMER + _varint(consumer_id)
        chunks.append(head)
        body_len += len(head)
    for e in entries:
        pre = bytearray()
        if e.partition:
            pre += _ENTRY_PARTITION + _varint(e.partition)
        if e.base_offset:
            pre += _ENTRY_BASE + _varint(e.base_offset)
        if len(e.batch):
            pre += _ENTRY_BATCH + _varint(len(e.batch))
        post = bytearray()
        packed = b"".join(_varint(s) for s in e.skip)
        if packed:
            post += _ENTRY_SKIP + _varint(len(packed)) + packed
        if e.redelivery_count:
            post += _ENTRY_REDELIVERY + _varint(e.redelivery_count)
        size = len(pre) + len(e.batch) + len(post)
        head = _MESSAGES_ENTRY + _varint(size) + pre
        chunks += [head, e.batch, bytes(post)]
        body_len += len(head) + len(e.batch) + len(post)
    outer = _RESPONSE_MESSAGES + _varint(body_len)
    return [_LENGTH.pack(len(outer) + body_len), outer, *chunks]


def parse(message: ProtoMessage, payload: bytes) -> ProtoMessage:
    """`payload` decoded into `message`; malformed bytes become InvalidRequest."""
    try:
        message.ParseFromString(payload)
    except Exception as exc:  # protobuf's DecodeError, or worse from a hostile peer
        raise InvalidRequest(f"malformed frame: {exc}") from exc
    return message
