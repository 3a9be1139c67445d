"""Encoding primitives for the hand-written response encoders (Produce, Fetch, ListOffsets).

Each takes `flexible` because flexible versions use compact (varint) lengths; their output is
checked byte for byte against kio's encoder in the tests.
"""

from __future__ import annotations

import struct

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


def bytes_len(n: int | None, flexible: bool) -> bytes:
    """The length prefix of a (nullable) bytes field whose content follows as separate chunks."""
    if n is None:
        return uvarint(0) if flexible else I32.pack(-1)
    return uvarint(n + 1) if flexible else I32.pack(n)
