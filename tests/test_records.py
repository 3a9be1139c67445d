"""RecordBatch v2: round trips through every codec, header checks, and Kafka's partitioner."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import CorruptMessage
from gateway.formats.partitioner import murmur2, partition_for_key
from gateway.formats.records import (
    ATTR_CONTROL,
    BatchBuilder,
    Compression,
    _xerial_decompress,
    build_control_batch,
    iter_records,
    parse_header,
    split_batches,
    with_base_offset,
)

record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=64)),
    st.one_of(st.none(), st.binary(max_size=512)),
    st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))), max_size=3),
    st.integers(min_value=0, max_value=2**41),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(record, min_size=1, max_size=20), st.sampled_from(list(Compression)))
def test_round_trip(records, codec):
    b = BatchBuilder(codec)
    for key, value, headers, ts in records:
        b.append(value, key, headers, ts)
    raw = b.build()
    h = parse_header(raw)
    assert h.record_count == len(records) and h.compression == codec and h.size == len(raw)
    got = list(iter_records(raw, 100))
    assert [(r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (k, v, hs, ts) for k, v, hs, ts in records
    ]
    assert [r.offset for r in got] == list(range(100, 100 + len(records)))
    assert h.max_timestamp == max(ts for *_, ts in records)


def test_crc_and_length_are_checked():
    raw = bytearray(_one())
    raw[-1] ^= 1
    with pytest.raises(CorruptMessage, match="CRC"):
        parse_header(bytes(raw))
    with pytest.raises(CorruptMessage, match="shorter"):
        parse_header(_one()[:30])
    with pytest.raises(CorruptMessage, match="length"):
        parse_header(_one()[:-1])
    bad_magic = bytearray(_one())
    bad_magic[16] = 1
    with pytest.raises(CorruptMessage, match="magic"):
        parse_header(bytes(bad_magic))


def _one(value: bytes = b"v") -> bytes:
    b = BatchBuilder()
    b.append(value, b"k")
    return b.build()


def test_split_and_patch_base_offset():
    blob = _one(b"a") + _one(b"b")
    parts = split_batches(blob)
    assert len(parts) == 2
    patched = b"".join(bytes(c) for c in with_base_offset(parts[1][1], 42))
    assert parse_header(patched).base_offset == 42  # the CRC does not cover the base offset
    assert next(iter_records(patched)).offset == 42


def test_xerial_framed_snappy_as_java_clients_send_it():
    import cramjam

    data = b"hello " * 1000
    chunks = [data[:3000], data[3000:]]
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for c in chunks:
        comp = bytes(cramjam.snappy.compress_raw(c))
        framed += struct.pack(">i", len(comp)) + comp
    assert _xerial_decompress(framed) == data


def test_control_batch_is_a_kafka_marker():
    raw = build_control_batch(True, producer_id=5, producer_epoch=2)
    h = parse_header(raw)
    assert h.control and h.transactional and h.attributes & ATTR_CONTROL
    (rec,) = iter_records(raw)
    assert rec.key == struct.pack(">hh", 0, 1)


def test_partitioner_matches_kafka():
    # vectors from Kafka's own tests of Utils.murmur2
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert partition_for_key(b"foobar", 12) == (-790332482 & 0x7FFFFFFF) % 12
