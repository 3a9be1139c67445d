"""Base-128 varints, the one copy: unsigned (protobuf fields, Kafka's compact lengths and tagged
fields) and zigzag (the lengths and deltas inside Kafka records).

A varint that runs past its buffer, or past 64 bits, raises `VarintError`: a corrupt record where
records are read; the Kafka face turns it into a malformed request.
"""

from __future__ import annotations

from gateway.errors import CorruptMessage

_TWO64 = 1 << 64
# The one-byte varints, ready made: most tags, partitions and small counts are one of them.
_SMALL = [bytes((n,)) for n in range(0x80)]


class VarintError(CorruptMessage):
    """A varint runs past the end of its buffer, or over 64 bits."""


def write_uvarint(out: bytearray, n: int) -> None:
    """Append `n`; a negative `n` goes as its 64-bit two's complement, as protobuf writes an int64."""
    if n < 0:
        n += _TWO64
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def uvarint(n: int) -> bytes:
    """`n` as a varint of its own, for encoders that join bytes."""
    if 0 <= n < 0x80:
        return _SMALL[n]
    out = bytearray()
    write_uvarint(out, n)
    return bytes(out)


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint at `pos`: (value, position after it)."""
    shift = result = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise VarintError("truncated or overlong varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def write_varint(out: bytearray, value: int) -> None:
    """Append `value` zigzag-encoded (small magnitudes, either sign, take few bytes). One and two
    bytes take the short way, as in `read_varint`: every record encoded writes five or more, and a
    plain call into `write_uvarint` measured 7% slower on encoding 1000 records of 100 bytes."""
    n = (value << 1) ^ (value >> 63)
    if n < 0x80:
        out.append(n)
    elif n < 0x4000:
        out.append((n & 0x7F) | 0x80)
        out.append(n >> 7)
    else:
        write_uvarint(out, n)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos`: (value, position after it). One and two bytes (deltas, lengths
    under 8 KiB) take the short way: this is the inner loop of every record decoded, and a plain
    call into `read_uvarint` measured 46% slower on decoding 1000 records of 100 bytes."""
    try:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        c = buf[pos + 1]
        if c < 0x80:
            n = (b & 0x7F) | (c << 7)
            return (n >> 1) ^ -(n & 1), pos + 2
    except IndexError:
        raise VarintError("truncated varint") from None
    n, pos = read_uvarint(buf, pos)
    return (n >> 1) ^ -(n & 1), pos
