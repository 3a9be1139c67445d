"""Encoding primitives for the hand-written response encoders (Produce, Fetch, ListOffsets).

Each takes `flexible` because flexible versions use compact (varint) lengths; their output is
checked byte for byte against kio's encoder in the tests.
"""

from __future__ import annotations

import struct

from gateway.kafka.errors import MalformedRequest

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
NO_TAGS = b"\x00"


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def array_len(n: int | None, flexible: bool) -> bytes:
    if n is None:
        return uvarint(0) if flexible else I32.pack(-1)
    return uvarint(n + 1) if flexible else I32.pack(n)


def string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return uvarint(0) if flexible else I16.pack(-1)
    b = s.encode()
    return (uvarint(len(b) + 1) if flexible else I16.pack(len(b))) + b


def bytes_len(n: int | None, flexible: bool) -> bytes:
    """The length prefix of a (nullable) bytes field whose content follows as separate chunks."""
    if n is None:
        return uvarint(0) if flexible else I32.pack(-1)
    return uvarint(n + 1) if flexible else I32.pack(n)


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint (compact lengths, tag counts) at `pos`: (value, position after it)."""
    shift = result = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise MalformedRequest("truncated or overlong varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
