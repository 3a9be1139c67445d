"""Kafka's RecordBatch v2, the one record format of both faces and of the log.

The hot paths only ever look at the fixed 61-byte header (`parse_header`); records are decoded
(`iter_records`) only where someone needs them: the native client, timestamp lookups, delay headers.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from enum import IntEnum
from typing import NamedTuple

import cramjam
import crc32c

from gateway.clock import now_ms
from gateway.errors import CorruptMessage
from gateway.formats.compaction import Keep, filter_records, keyless
from gateway.formats.varint import read_varint, write_varint

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
# Offsets inside the header, for the few fields patched or read in place.
LENGTH_END = 12  # base offset (8) + batch length (4): what the batch length does not count
CRC_AT = 17
CRC_START = 21  # the CRC covers everything from the attributes on
ATTRIBUTES = struct.Struct(">h")  # at CRC_START
MAX_TIMESTAMP = struct.Struct(">q")
MAX_TIMESTAMP_AT = 35
RECORD_COUNT = struct.Struct(">i")
RECORD_COUNT_AT = 57

ATTR_COMPRESSION = 0x07
ATTR_TIMESTAMP_LOG_APPEND = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40  # KIP-534: the base timestamp is the time the batch's tombstones may go

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
# Control record types of watermark markers ("WS", "WI"): far from the types Kafka defines, which
# clients other than Kafka's own servers know only as abort (0) and commit (1).
CONTROL_WATERMARK_SET = 0x5753
CONTROL_WATERMARK_IDLE = 0x5749


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | int | None) -> Compression:
        if name is None:
            return cls.NONE
        if isinstance(name, int):
            return cls(name)
        return cls[name.upper()]


class BatchHeader(NamedTuple):
    base_offset: int
    length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & ATTR_COMPRESSION)

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def size(self) -> int:
        return self.length + LENGTH_END

    @property
    def last_sequence(self) -> int:
        return -1 if self.base_sequence < 0 else self.base_sequence + self.last_offset_delta


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def parse_header(buf: bytes | memoryview, pos: int = 0, *, verify_crc: bool = True) -> BatchHeader:
    """Read and check one batch header at `pos`; raises CorruptMessage on anything malformed."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptMessage("record batch shorter than its header")
    h = BatchHeader._make(HEADER.unpack_from(buf, pos))
    if h.magic != 2:
        raise CorruptMessage(f"unsupported record batch magic {h.magic}")
    if h.length < HEADER_SIZE - LENGTH_END or pos + h.size > len(buf):
        raise CorruptMessage("record batch length does not match its bytes")
    if h.last_offset_delta < 0 or h.record_count < 0 or h.attributes & ATTR_COMPRESSION > 4:
        raise CorruptMessage("record batch header fields out of range")
    if verify_crc and crc32c.crc32c(memoryview(buf)[pos + CRC_START : pos + h.size]) != h.crc:
        raise CorruptMessage("record batch CRC mismatch")
    return h


def stamp_log_append_time(h: BatchHeader, batch: memoryview, now: int) -> tuple[BatchHeader, memoryview]:
    """A copy of `batch` marked as stamped with log append time `now`, as Kafka's
    `DefaultRecordBatch.setMaxTimestamp(LOG_APPEND_TIME, now)` does: the timestamp-type attribute
    set, the max timestamp replaced and the CRC computed again; records keep their deltas, and
    readers take every record's timestamp from the max timestamp."""
    out = bytearray(batch)
    attributes = h.attributes | ATTR_TIMESTAMP_LOG_APPEND
    ATTRIBUTES.pack_into(out, CRC_START, attributes)
    MAX_TIMESTAMP.pack_into(out, MAX_TIMESTAMP_AT, now)
    crc = crc32c.crc32c(memoryview(out)[CRC_START:])
    struct.pack_into(">I", out, CRC_AT, crc)
    return h._replace(attributes=attributes, max_timestamp=now, crc=crc), memoryview(out)


def split_batches(buf: bytes | memoryview, *, verify_crc: bool = True) -> list[tuple[BatchHeader, memoryview]]:
    """Split a records blob (as in a produce request) into its batches, each checked."""
    view = memoryview(buf)
    out: list[tuple[BatchHeader, memoryview]] = []
    pos = 0
    while pos < len(view):
        h = parse_header(view, pos, verify_crc=verify_crc)
        out.append((h, view[pos : pos + h.size]))
        pos += h.size
    return out


# -- compression ---------------------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def compress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    return bytes(cramjam.zstd.compress(data))


def decompress(codec: Compression, data: bytes | memoryview) -> bytes:
    """Undo a batch's compression; snappy comes raw or in the xerial framing Java clients use."""
    if codec == Compression.NONE:
        return bytes(data)
    try:
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(bytes(data)))
        if codec == Compression.SNAPPY:
            if bytes(data[:8]) == _XERIAL_MAGIC:
                return _xerial_decompress(bytes(data))
            return bytes(cramjam.snappy.decompress_raw(bytes(data)))
        if codec == Compression.LZ4:
            return bytes(cramjam.lz4.decompress(bytes(data)))
        return bytes(cramjam.zstd.decompress(bytes(data)))
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise CorruptMessage(f"cannot decompress {codec.name.lower()} batch: {exc}") from exc


def _xerial_decompress(data: bytes) -> bytes:
    out = bytearray()
    pos = 16  # magic (8) + version (4) + compatible version (4)
    while pos < len(data):
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out += cramjam.snappy.decompress_raw(data[pos : pos + n])
        pos += n
    return bytes(out)


def _read_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise CorruptMessage("record field runs past the batch")
    return bytes(buf[pos : pos + n]), pos + n


# -- records --------------------------------------------------------------------------------------


def _decoded(batch: bytes | memoryview) -> tuple[BatchHeader, bytes]:
    """A batch's header and its record bytes, decompressed."""
    h = parse_header(batch, verify_crc=False)
    return h, decompress(h.compression, memoryview(batch)[HEADER_SIZE : h.size])


def _record_fields(body: bytes | memoryview, count: int) -> Iterator[tuple[int, int, int, int, int]]:
    """Per record: attributes, timestamp delta, offset delta, where its key starts, where it ends.
    Lengths of up to two bytes and one-byte deltas (the usual ones) are decoded in place: every
    produce to a compacted topic and every record the cleaner reads go through here."""
    pos, size = 0, len(body)
    try:
        for _ in range(count):
            c = body[pos]
            if c < 0x80:
                length, pos = (c >> 1) ^ -(c & 1), pos + 1
            elif (d := body[pos + 1]) < 0x80:
                n = (c & 0x7F) | (d << 7)
                length, pos = (n >> 1) ^ -(n & 1), pos + 2
            else:
                length, pos = read_varint(body, pos)
            end = pos + length
            if length < 0 or end > size:
                raise CorruptMessage("record runs past the batch")
            attributes, b = body[pos], body[pos + 1]
            if b < 0x80:
                ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                ts_delta, pos = read_varint(body, pos + 1)
            b = body[pos]
            if b < 0x80:
                off_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                off_delta, pos = read_varint(body, pos)
            yield attributes, ts_delta, off_delta, pos, end
            pos = end
    except IndexError:
        raise CorruptMessage("record runs past the batch") from None


def iter_records(batch: bytes | memoryview, base_offset: int | None = None) -> Iterator[Record]:
    """Decode the records of one batch; `base_offset` overrides the one stored in the batch."""
    h, body = _decoded(batch)
    base = h.base_offset if base_offset is None else base_offset
    log_append = bool(h.attributes & ATTR_TIMESTAMP_LOG_APPEND)
    for _, ts_delta, off_delta, pos, _ in _record_fields(body, h.record_count):
        key, pos = _read_bytes(body, pos)
        value, pos = _read_bytes(body, pos)
        n_headers, pos = read_varint(body, pos)
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(n_headers):
            hk, pos = _read_bytes(body, pos)
            hv, pos = _read_bytes(body, pos)
            headers.append(((hk or b"").decode("utf-8", "replace"), hv))
        timestamp = h.max_timestamp if log_append else h.base_timestamp + ts_delta
        yield Record(base + off_delta, timestamp, key, value, headers)


def record_keys(batch: bytes | memoryview) -> list[tuple[int, bytes | None]]:
    """Each record's offset delta and key, nothing else decoded: what Key_Shared dispatch routes by."""
    h = parse_header(batch, verify_crc=False)
    body = record_body(h, batch)
    return [(off_delta, _read_bytes(body, pos)[0]) for _, _, off_delta, pos, _ in _record_fields(body, h.record_count)]


def record_body(h: BatchHeader, batch: bytes | memoryview) -> bytes | memoryview:
    """A batch's record bytes, decompressed (without a copy when it is not compressed)."""
    body = memoryview(batch)[HEADER_SIZE : h.size]
    return body if h.compression == Compression.NONE else decompress(h.compression, body)


def keyless_record(batch: bytes | memoryview) -> int:
    """The index of the batch's first record without a key, -1 when every record has one: what a
    compacted topic refuses. A key is null when its length is negative (Kafka's `DefaultRecord`);
    nothing else of a record is decoded, and a compressed body is decompressed first, as Kafka's
    LogValidator does. Every produce to a compacted topic pays this walk: about 0.01 us a record in
    C, 0.35 in Python (gateway/formats/compaction.py)."""
    h = parse_header(batch, verify_crc=False)
    return keyless(record_body(h, batch), h.record_count)


class Filtered(NamedTuple):
    """What `filter_batch` kept of a batch."""

    batch: bytes | None  # the batch as it stays: None when no record does
    records: int  # the records kept
    horizon: int  # the delete horizon of the tombstones kept, -1 when it keeps none


def filter_batch(batch: bytes, base_offset: int, keep: Keep, *, now: int, delete_retention_ms: int) -> Filtered:
    """The batch with only the records that stay (`keep`: see `filter_records`; `base_offset` is its
    offset in the log, which a stored batch's header need not hold), as Kafka's cleaner
    rewrites one (`MemoryRecords.filterTo`): same base offset, producer id, epoch and base sequence,
    records keep their offset deltas, and the last offset delta is kept (`overrideLastOffset`), so
    the batch still spans all its offsets and a reader moves past it to the next. Tombstones go once
    the batch's delete horizon (KIP-534) has passed; the first rewrite that keeps some sets it to
    `now` + `delete_retention_ms`: the base timestamp becomes that time, the horizon attribute is
    set and the records' timestamp deltas are re-based. Compressed with the batch's codec, the CRC
    computed anew; when every record stays and nothing changes, the batch is returned as it was."""
    h = parse_header(batch, verify_crc=False)
    body = record_body(h, batch)
    horizon = delete_horizon(h)
    expired = 0 <= horizon <= now
    out, kept, tombstones, max_delta = filter_records(body, h.record_count, base_offset, keep, expired, 0, 0)
    if not kept:
        return Filtered(None, 0, -1)
    if kept == h.record_count and (horizon >= 0 or not tombstones):
        return Filtered(batch, kept, horizon if tombstones else -1)
    if tombstones and horizon < 0:
        horizon = now + delete_retention_ms
        out, *_ = filter_records(body, h.record_count, base_offset, keep, False, h.base_timestamp - horizon, 0)
    max_ts = h.max_timestamp if h.attributes & ATTR_TIMESTAMP_LOG_APPEND else h.base_timestamp + max_delta
    rewritten = assemble(compress(h.compression, out), attributes=h.attributes | (ATTR_DELETE_HORIZON if horizon >= 0 else 0),
                         last_offset_delta=h.last_offset_delta, base_timestamp=horizon if horizon >= 0 else h.base_timestamp,
                         max_timestamp=max_ts, producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                         base_sequence=h.base_sequence, record_count=kept, base_offset=h.base_offset,
                         leader_epoch=h.leader_epoch)
    return Filtered(rewritten, kept, horizon if tombstones else -1)


def joinable(h: BatchHeader) -> bool:
    """Whether a cleaned batch may be joined with its neighbours (`join_batches`): it carries no
    producer state (no producer id, so no sequence; not transactional), is no control batch, holds
    create times (a log-append-time batch gives all its records one time) and no delete horizon."""
    return h.producer_id < 0 and not h.attributes & (
        ATTR_TRANSACTIONAL | ATTR_CONTROL | ATTR_TIMESTAMP_LOG_APPEND | ATTR_DELETE_HORIZON)


def join_batches(batches: list[tuple[int, bytes]]) -> bytes:
    """Joinable batches (base offset in the log, bytes) of one codec, each starting where the last
    ends, as one batch: its base offset and base timestamp the first's, every record's offset and
    timestamp unchanged (their deltas re-based), and the last offset delta reaching the last one's
    end, so it spans exactly the offsets they spanned. What the cleaner writes for a run of small
    cleaned batches: one stream entry and one header instead of one each."""
    first_base, first = batches[0]
    h0 = parse_header(first, verify_crc=False)
    body = bytearray()
    count, max_ts, last_delta = 0, -1, 0
    for base, batch in batches:
        h = parse_header(batch, verify_crc=False)
        out, kept, _, _ = filter_records(record_body(h, batch), h.record_count, base, None, False,
                                         h.base_timestamp - h0.base_timestamp, base - first_base)
        body += out
        count += kept
        max_ts = max(max_ts, h.max_timestamp)
        last_delta = base - first_base + h.last_offset_delta
    return assemble(compress(h0.compression, bytes(body)), attributes=h0.attributes, last_offset_delta=last_delta,
                    base_timestamp=h0.base_timestamp, max_timestamp=max_ts, producer_id=h0.producer_id,
                    producer_epoch=h0.producer_epoch, base_sequence=-1, record_count=count,
                    base_offset=h0.base_offset, leader_epoch=h0.leader_epoch)


def delete_horizon(h: BatchHeader) -> int:
    """When a cleaned batch's tombstones may go (KIP-534), -1 when the cleaner has not set it."""
    return h.base_timestamp if h.attributes & ATTR_DELETE_HORIZON else -1


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]] = (),
) -> None:
    body = bytearray(b"\x00")
    varint = write_varint
    varint(body, timestamp_delta)
    varint(body, offset_delta)
    if key is None:
        body.append(1)  # -1
    else:
        varint(body, len(key))
        body += key
    if value is None:
        body.append(1)
    else:
        varint(body, len(value))
        body += value
    hs = list(headers) if headers else ()
    if not hs:
        body.append(0)
    else:
        varint(body, len(hs))
        for hk, hv in hs:
            kb = hk.encode()
            varint(body, len(kb))
            body += kb
            if hv is None:
                body.append(1)
            else:
                varint(body, len(hv))
                body += hv
    varint(out, len(body))
    out += body


class BatchBuilder:
    """Accumulates records into one RecordBatch v2; the native producer's unit of send."""

    def __init__(
        self,
        compression: Compression = Compression.NONE,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
    ) -> None:
        self.compression = compression
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.transactional = transactional
        self._body = bytearray()
        self._count = 0
        self._base_ts = -1
        self._max_ts = -1

    def __len__(self) -> int:
        return self._count

    @property
    def size_estimate(self) -> int:
        return HEADER_SIZE + len(self._body)

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes | None]] = (),
        timestamp: int | None = None,
    ) -> int:
        """Add a record; returns its offset delta within the batch."""
        ts = now_ms() if timestamp is None else timestamp
        if self._count == 0:
            self._base_ts = ts
        self._max_ts = max(self._max_ts, ts)
        delta = self._count
        encode_record(self._body, delta, ts - self._base_ts, key, value, headers)
        self._count += 1
        return delta

    def build(self, *, attributes_extra: int = 0) -> bytes:
        if self._count == 0:
            raise ValueError("an empty batch cannot be built")
        body = compress(self.compression, bytes(self._body))
        attributes = int(self.compression) | attributes_extra
        if self.transactional:
            attributes |= ATTR_TRANSACTIONAL
        return assemble(
            body,
            attributes=attributes,
            last_offset_delta=self._count - 1,
            base_timestamp=self._base_ts,
            max_timestamp=self._max_ts,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            record_count=self._count,
        )


def assemble(
    body: bytes,
    *,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
    base_offset: int = 0,
    leader_epoch: int = 0,
) -> bytes:
    """Put the header (with its CRC) in front of an encoded, possibly compressed, record body."""
    tail = struct.pack(
        ">hiqqqhii",
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    crc = crc32c.crc32c(body, crc32c.crc32c(tail))
    length = HEADER_SIZE - LENGTH_END + len(body)
    return struct.pack(">qiibI", base_offset, length, leader_epoch, 2, crc) + tail + body


def build_batch(
    records: Iterable[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    compression: Compression = Compression.NONE,
    *,
    timestamp: int | None = None,
) -> bytes:
    """One batch from (key, value, headers) triples, all stamped with `timestamp` (now by default)."""
    b = BatchBuilder(compression)
    for key, value, headers in records:
        b.append(value, key, headers, timestamp)
    return b.build()


def build_control_batch(commit: bool, producer_id: int, producer_epoch: int, coordinator_epoch: int = 0) -> bytes:
    """A transaction marker as Kafka writes it: a control batch of one record."""
    value = struct.pack(">hi", 0, coordinator_epoch)
    return _control_batch(CONTROL_COMMIT if commit else CONTROL_ABORT, value, producer_id, producer_epoch, True)


def build_watermark_batch(
    idle: bool, value: bytes, *, producer_id: int = -1, producer_epoch: int = -1, transactional: bool = False
) -> bytes:
    """A watermark marker (W_SET, or W_IDLE when `idle`): a control batch of one record whose type no
    Kafka client acts on, so they skip it like a commit marker. Inside a transaction it carries the
    transaction's producer and flag, so its fate is the transaction's."""
    return _control_batch(
        CONTROL_WATERMARK_IDLE if idle else CONTROL_WATERMARK_SET, value, producer_id, producer_epoch, transactional
    )


def _control_batch(kind: int, value: bytes, producer_id: int, producer_epoch: int, transactional: bool) -> bytes:
    out = bytearray()
    encode_record(out, 0, 0, struct.pack(">hh", 0, kind), value)
    now = now_ms()
    return assemble(
        bytes(out),
        attributes=ATTR_CONTROL | (ATTR_TRANSACTIONAL if transactional else 0),
        last_offset_delta=0,
        base_timestamp=now,
        max_timestamp=now,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        record_count=1,
    )


def control_record(batch: bytes | memoryview) -> tuple[int, bytes | None]:
    """(type, value) of a control batch's record: a commit or abort marker, or a watermark."""
    for rec in iter_records(batch):
        if rec.key is None or len(rec.key) < 4:
            break
        _, kind = struct.unpack_from(">hh", rec.key)
        return kind, rec.value
    raise CorruptMessage("a control batch without a control record")


def with_base_offset(batch: bytes | memoryview, base_offset: int) -> list[bytes | memoryview]:
    """The batch as chunks with its base offset patched in, for `writelines` without a copy."""
    return [struct.pack(">q", base_offset), memoryview(batch)[8:]]
