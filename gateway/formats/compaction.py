"""The record walks of compacted topics: the produce-side key check and the log cleaner's two walks.

Each takes the record bytes of one batch (after its 61-byte header, decompressed: a compressed
batch is decompressed by the caller first, as Kafka's `LogValidator` and cleaner do) and its record
count, and makes no Python object per record:

- `keyless(body, count)`: the index of the first record without a key, -1 when every one has one;
- `OffsetMap(capacity)`: key digest -> latest offset; `add(body, count, base_offset)` maps every
  keyed record of a batch, `survivors()` is its offsets, sorted (native int64s): the records of the
  section the map was built from that stay;
- `filter_records(body, count, base_offset, keep, drop_tombstones, ts_shift, off_shift)`: the
  records of a batch that stay, as a new record body, with how many stayed, how many of them are
  tombstones, and their largest timestamp delta. `keep` is a slice of `survivors()` (the batch was
  in the map's section: a record stays when its offset is one of them), the `OffsetMap` itself (the
  batch was cleaned before: a keyed record stays unless the map holds its key) or None (every record
  stays). `drop_tombstones` drops records with a null value; `ts_shift` and `off_shift` are added to
  every timestamp and offset delta (re-basing the batch on a delete horizon, or on the batch it
  joins), and a record's bytes are otherwise copied as they were.

`gateway/formats/_speedups.c` does these in C when the extension was built (setuptools builds it
when the machine has a compiler and Python's headers; `./dev` installs them); the Python walks below
give the same results (tests/test_compaction_walks.py runs both on the same batches). They differ in
the offset map's digest (SipHash-1-3 keyed by a random seed in C, BLAKE2b here, both 16 bytes), so
only a collision of 16-byte digests, which neither ever meets, could tell them apart; and in memory:
the C map is a table of 24-byte slots at most 3/4 full that doubles as keys come (32 bytes a key at
most), the Python one a dict of about 125 bytes a key.
"""

from __future__ import annotations

import hashlib
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

from gateway.errors import CorruptMessage
from gateway.formats.varint import read_uvarint, read_varint, write_varint


class Walk(NamedTuple):
    """One record as the walks see it (positions in the record body)."""

    start: int  # its length varint
    ts_at: int  # its timestamp delta (the attributes byte is just before)
    off_at: int  # its offset delta
    key_at: int  # its key's length
    end: int
    ts_delta: int
    off_delta: int
    key: bytes | None
    tombstone: bool


def walk(body: bytes | memoryview, count: int) -> Iterator[Walk]:
    """Every record of a record body, checked as the C walk checks it."""
    pos, size = 0, len(body)
    try:
        for _ in range(count):
            start = pos
            length, pos = read_varint(body, pos)
            end = pos + length
            if length <= 0 or end > size:
                raise CorruptMessage("record runs past the batch")
            ts_at = pos + 1
            ts_delta, off_at = read_varint(body, ts_at)
            off_delta, key_at = read_varint(body, off_at)
            key_len, p = read_varint(body, key_at)
            key = None
            if key_len >= 0:
                key, p = bytes(body[p:p + key_len]), p + key_len
            value_len, p = read_varint(body, p)
            if p > end or value_len > end - p:
                raise CorruptMessage("record runs past the batch")
            yield Walk(start, ts_at, off_at, key_at, end, ts_delta, off_delta, key, value_len < 0)
            pos = end
    except IndexError:
        raise CorruptMessage("record runs past the batch") from None


def py_keyless(body: bytes | memoryview, count: int) -> int:
    """`keyless` in Python. Every produce to a compacted topic pays it when the C walk is missing, so
    it reads the usual encodings in place: a record length of one or two bytes, a timestamp delta
    of one, an offset delta of one or two; longer ones take a slower path. Negative lengths and
    records running past the body are checked once, after the walk (lengths only move it forward
    when none is negative). About 0.35 us a record of 100 bytes, against 0.47 for a walk that calls
    `read_varint`."""
    pos = end = signs = 0
    found = -1
    try:
        for i in range(count):
            c = body[pos]
            if c < 0x80:
                end, p = pos + 1 + (c >> 1), pos + 2  # p: the timestamp delta, after the attributes
            elif (d := body[pos + 1]) < 0x80:
                end, p = pos + 2 + ((c & 0x7F | d << 7) >> 1), pos + 3
            else:
                n, p = read_uvarint(body, pos)
                end, p = p + (n >> 1), p + 1
            signs |= c
            while body[p] > 0x7F:  # the timestamp delta
                p += 1
            if body[p + 1] < 0x80:  # the offset delta: k is where the key length starts
                k = p + 2
            elif body[p + 2] < 0x80:
                k = p + 3
            else:
                k = p + 3
                while body[k] > 0x7F:
                    k += 1
                k += 1
            if k >= end:
                raise CorruptMessage("record runs past the batch")
            if body[k] & 1:
                found = i
                break
            pos = end
    except IndexError:
        raise CorruptMessage("record runs past the batch") from None
    if signs & 1 or end > len(body):
        raise CorruptMessage("record runs past the batch")
    return found


class PyOffsetMap:
    """`OffsetMap` in Python: a dict of BLAKE2b digests."""

    def __init__(self, capacity: int, seed: bytes) -> None:
        self.capacity = capacity
        self.offsets: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self.offsets)

    @staticmethod
    def digest(key: bytes) -> bytes:
        return hashlib.blake2b(key, digest_size=16).digest()

    def add(self, body: bytes | memoryview, count: int, base_offset: int) -> None:
        for r in walk(body, count):
            if r.key is not None:
                d = self.digest(r.key)
                if d not in self.offsets and len(self.offsets) == self.capacity:
                    raise OverflowError("the offset map is full")
                self.offsets[d] = base_offset + r.off_delta

    def survivors(self) -> bytes:
        return array("q", sorted(self.offsets.values())).tobytes()


class OffsetMapLike(Protocol):
    def __len__(self) -> int: ...
    def add(self, body: bytes | memoryview, count: int, base_offset: int, /) -> None: ...
    def survivors(self) -> bytes: ...


def py_filter_records(body: bytes | memoryview, count: int, base_offset: int, keep: bytes | PyOffsetMap | None,
                      drop_tombstones: bool, ts_shift: int, off_shift: int) -> tuple[bytes, int, int, int]:
    """`filter_records` in Python."""
    if isinstance(keep, PyOffsetMap):
        latest = keep.offsets
        digest = keep.digest

        def stays(r: Walk) -> bool:
            return r.key is not None and latest.get(digest(r.key), -1) <= base_offset + r.off_delta
    elif keep is not None:
        offsets = memoryview(keep).cast("q")

        def stays(r: Walk) -> bool:
            i = bisect_left(offsets, base_offset + r.off_delta)
            return i < len(offsets) and offsets[i] == base_offset + r.off_delta
    else:
        def stays(r: Walk) -> bool:
            return True
    out = bytearray()
    kept = tombstones = 0
    max_delta = None
    for r in walk(body, count):
        if not stays(r) or (r.tombstone and drop_tombstones):
            continue
        kept += 1
        tombstones += r.tombstone
        max_delta = r.ts_delta if max_delta is None else max(max_delta, r.ts_delta)
        if not ts_shift and not off_shift:
            out += body[r.start:r.end]
        else:
            rec = bytearray(body[r.ts_at - 1:r.ts_at])  # the attributes
            write_varint(rec, r.ts_delta + ts_shift)
            write_varint(rec, r.off_delta + off_shift)
            rec += body[r.key_at:r.end]
            write_varint(out, len(rec))
            out += rec
    return bytes(out), kept, tombstones, max_delta or 0


Keep = Any  # a slice of `survivors()` or the OffsetMap, of whichever implementation runs

try:
    from gateway.formats import _speedups
except ImportError:  # built without a compiler: the Python walks
    _speedups = None  # type: ignore[assignment]

ACCELERATED = _speedups is not None
keyless: Callable[[bytes | memoryview, int], int] = _speedups.keyless if ACCELERATED else py_keyless
OffsetMap: Callable[[int, bytes], OffsetMapLike] = _speedups.OffsetMap if ACCELERATED else PyOffsetMap
filter_records: Callable[[bytes | memoryview, int, int, Keep, bool, int, int], tuple[bytes, int, int, int]] = (
    _speedups.filter_records if ACCELERATED else py_filter_records)
