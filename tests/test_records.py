"""RecordBatch v2: round trips through every codec, header checks, and Kafka's partitioner."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import CorruptMessage
from gateway.formats.partitioner import murmur2, partition_for_key
from gateway.formats.records import (
    ATTR_CONTROL,
    BatchBuilder,
    Compression,
    _xerial_decompress,
    assemble,
    build_control_batch,
    compress,
    encode_record,
    iter_records,
    keyless_record,
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


# keys null or not, short and long (two- and three-byte length varints), values long enough for
# three-byte record lengths, timestamp and offset deltas of any size and sign, headers
keyed_record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=200)),
    st.one_of(st.none(), st.binary(max_size=100), st.binary(min_size=8200, max_size=8300)),
    st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))), max_size=3),
    st.one_of(st.integers(0, 63), st.integers(-(2**40), 2**40)),
    st.one_of(st.none(), st.integers(-(2**20), 2**31 - 1)),  # None: the record's index
)


def _records_batch(records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int, int | None]],
                   codec: Compression) -> bytes:
    body = bytearray()
    for i, (key, value, headers, ts_delta, offset_delta) in enumerate(records):
        encode_record(body, i if offset_delta is None else offset_delta, ts_delta, key, value, headers)
    return assemble(compress(codec, bytes(body)), attributes=codec, last_offset_delta=len(records) - 1,
                    base_timestamp=0, max_timestamp=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                    record_count=len(records))


@settings(max_examples=150, deadline=None,  # values of 8 KB: generating them is slow on a busy machine
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(st.lists(keyed_record, min_size=1, max_size=80), st.booleans(),
       st.sampled_from([Compression.NONE, Compression.NONE, Compression.NONE, Compression.ZSTD]))
def test_keyless_record_agrees_with_the_full_decoder(records, null_last, codec):
    if null_last:  # every record keyed but the last
        records = [(key if key is not None else b"", *rest) for key, *rest in records[:-1]] + [(None, *records[-1][1:])]
    batch = _records_batch(records, codec)
    expected = next((i for i, r in enumerate(iter_records(batch)) if r.key is None), -1)
    assert keyless_record(batch) == expected


def test_keyless_record_refuses_what_the_decoder_refuses():
    batch = bytearray(_records_batch([(b"k", b"v", [], 0, None), (b"k", b"v" * 100, [], 0, None)], Compression.NONE))
    with pytest.raises(CorruptMessage):  # the last record cut short
        keyless_record(bytes(assemble(bytes(batch[61:-5]), attributes=0, last_offset_delta=1, base_timestamp=0,
                                      max_timestamp=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                      record_count=2)))
    negative = bytearray(batch[61:])
    negative[0] = 0x03  # a record length of -2
    with pytest.raises(CorruptMessage):
        keyless_record(assemble(bytes(negative), attributes=0, last_offset_delta=1, base_timestamp=0, max_timestamp=0,
                                producer_id=-1, producer_epoch=-1, base_sequence=-1, record_count=2))
