"""Tiered segments: a closed range of a partition's stored batches as two immutable objects.

The data object is the batches as they were stored, one after another, each with its base offset
patched in: a valid Kafka log segment, so a remote read is a ranged GET whose bytes go to the
client as they are. The index object says where each batch starts (Kafka keeps a sparse offset
index and a time index; one row a batch is small beside the batch and finds any batch without a
scan), each batch's running maximum timestamp (the stream's `t`, for ListOffsets by time), and the
aborted transactions whose ranges meet the segment (Kafka's transaction index), for
READ_COMMITTED readers. Followed: KIP-405's RemoteLogSegmentMetadata and LogSegmentData.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from dataclasses import dataclass

_MAGIC = b"GWSEG1"
_ROW = struct.Struct(">qiqq")  # base offset, offsets spanned, position in the data object, running max ts
_ABORTED = struct.Struct(">qqq")  # producer id, first offset, marker offset
_COUNTS = struct.Struct(">ii")


@dataclass(frozen=True)
class SegmentIndex:
    bases: list[int]
    counts: list[int]
    positions: list[int]  # one more than batches: the data object's size last
    max_timestamps: list[int]
    aborted: list[tuple[int, int, int]]

    def holding(self, offset: int) -> int:
        """The row of the batch holding `offset`, or of the first batch after it; len() when none."""
        i = bisect_right(self.bases, offset) - 1
        if i >= 0 and self.bases[i] + self.counts[i] > offset:
            return i
        return i + 1

    def span(self, first: int, rows: int, max_bytes: int) -> tuple[int, int]:
        """Rows [first, last) of at most `rows` batches and about `max_bytes` (the first always)."""
        last = first + 1
        limit = min(len(self.bases), first + max(rows, 1))
        while last < limit and self.positions[last + 1] - self.positions[first] <= max_bytes:
            last += 1
        return first, last

    def first_reaching(self, ts: int) -> int:
        """The first row whose running max timestamp reaches `ts`; len() when none does."""
        for i, t in enumerate(self.max_timestamps):
            if t >= ts:
                return i
        return len(self.bases)


def build(batches: list[tuple[int, int, int, bytes]],
          aborted: list[tuple[int, int, int]]) -> tuple[list[bytes | memoryview], bytes]:
    """(data object, index object) of consecutive stored batches, each given as (base offset,
    offsets spanned, the log's running max timestamp at it, the batch as stored), and the aborted
    transactions (producer id, first offset, marker offset) whose ranges meet them. The data object
    comes as the buffers to write one after another (each batch's patched base offset, then the
    rest of the batch itself): megabytes are never copied into one object on the way to the store."""
    parts: list[bytes | memoryview] = []
    rows = bytearray()
    position = 0
    for base, count, max_ts, batch in batches:
        rows += _ROW.pack(base, count, position, max_ts)
        parts += (struct.pack(">q", base), memoryview(batch)[8:])
        position += len(batch)
    index = bytearray(_MAGIC)
    index += _COUNTS.pack(len(batches), len(aborted))
    index += rows
    for a in aborted:
        index += _ABORTED.pack(*a)
    index += struct.pack(">q", position)
    return parts, bytes(index)


def parse_index(raw: bytes) -> SegmentIndex:
    if raw[: len(_MAGIC)] != _MAGIC:
        raise ValueError("not a segment index")
    n, a = _COUNTS.unpack_from(raw, len(_MAGIC))
    at = len(_MAGIC) + _COUNTS.size
    bases, counts, positions, maxts = [], [], [], []
    for base, count, pos, ts in _ROW.iter_unpack(raw[at: at + n * _ROW.size]):
        bases.append(base)
        counts.append(count)
        positions.append(pos)
        maxts.append(ts)
    at += n * _ROW.size
    aborted = [tuple(x) for x in _ABORTED.iter_unpack(raw[at: at + a * _ABORTED.size])]
    at += a * _ABORTED.size
    positions.append(struct.unpack_from(">q", raw, at)[0])
    return SegmentIndex(bases, counts, positions, maxts, aborted)


def split(index: SegmentIndex, first: int, last: int, data: bytes) -> list[tuple[int, int, bytes]]:
    """Rows [first, last) out of `data`, the bytes a ranged read of them returned:
    (base offset, offsets spanned, batch), each batch a slice of `data`, never decoded."""
    origin = index.positions[first]
    view = memoryview(data)
    return [(index.bases[i], index.counts[i],
             bytes(view[index.positions[i] - origin: index.positions[i + 1] - origin]))
            for i in range(first, last)]
