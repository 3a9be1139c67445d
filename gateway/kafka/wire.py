"""Encoding primitives for the hand-written response encoders (Produce, Fetch, ListOffsets).

Each takes `flexible` because flexible versions use compact (varint) lengths; their output is
checked byte for byte against kio's encoder in the tests.
"""

from __future__ import annotations

import struct
import uuid

from gateway.formats.varint import uvarint

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
NO_TAGS = b"\x00"


def array_len(n: int | None, flexible: bool) -> bytes:
    if n is None:
        return uvarint(0) if flexible else I32.pack(-1)
    return uvarint(n + 1) if flexible else I32.pack(n)


def string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return uvarint(0) if flexible else I16.pack(-1)
    b = s.encode()
    return (uvarint(len(b) + 1) if flexible else I16.pack(len(b))) + b


def topic_key(key: str | uuid.UUID | None, by_id: bool, flexible: bool) -> bytes:
    """A topic as a response names it: by name, or (KIP-516 versions) by its 16-byte id."""
    if by_id:
        return key.bytes if isinstance(key, uuid.UUID) else bytes(16)
    return string(key if isinstance(key, str) else None, flexible)


def bytes_len(n: int | None, flexible: bool) -> bytes:
    """The length prefix of a (nullable) bytes field whose content follows as separate chunks."""
    if n is None:
        return uvarint(0) if flexible else I32.pack(-1)
    return uvarint(n + 1) if flexible else I32.pack(n)
