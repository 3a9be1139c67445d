"""The record walks of compacted topics: the C extension and the Python walks give the same results on
the same batches, and both agree with the full record decoder."""

from __future__ import annotations

import os
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import CorruptMessage
from gateway.formats import _speedups, compaction
from gateway.formats.records import BatchBuilder, Compression, iter_records, parse_header, record_body

record = st.tuples(
    st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b""]), st.binary(max_size=300)),  # key
    st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=200, max_size=400)),  # value, None a tombstone
    st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=8))), max_size=2),
    st.integers(0, 2**35),  # timestamp delta: one byte to five
)


def _batch(records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
           codec: Compression) -> bytes:
    b = BatchBuilder(codec)
    for key, value, headers, ts in records:
        b.append(value, key, headers, timestamp=1_700_000_000_000 + ts)
    batch = bytearray(b.build())
    batch[:8] = (1_000).to_bytes(8, "big")
    return bytes(batch)


def test_the_c_walks_are_built() -> None:
    """`./dev` installs a compiler and Python's headers, so the suite runs the C walks."""
    assert compaction.ACCELERATED and compaction.keyless is _speedups.keyless


def test_the_offset_map_digest_is_siphash_2_4() -> None:
    """The reference implementation's first and sixteenth 128-bit test vectors."""
    key = bytes(range(16))
    assert _speedups.siphash128(key, b"").hex() == "a3817f04ba25a8e66df67214c7550293"
    assert _speedups.siphash128(key, bytes(range(15))).hex() == "5493e99933b0a8117e08ec0f97cfc3d9"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(record, min_size=1, max_size=60), st.sampled_from([Compression.NONE, Compression.NONE, Compression.LZ4]),
       st.data())
def test_c_and_python_walks_agree(records, codec, data) -> None:
    batch = _batch(records, codec)
    h = parse_header(batch)
    body = record_body(h, batch)  # a compressed batch is decompressed first
    decoded = list(iter_records(batch))
    count = h.record_count

    first_keyless = next((i for i, r in enumerate(decoded) if r.key is None), -1)
    assert _speedups.keyless(body, count) == compaction.py_keyless(body, count) == first_keyless

    seed = os.urandom(16)
    c_map, py_map = _speedups.OffsetMap(100, seed), compaction.PyOffsetMap(100, seed)
    c_map.add(body, count, h.base_offset)
    py_map.add(body, count, h.base_offset)
    latest = {r.key: r.offset for r in decoded if r.key is not None}
    assert len(c_map) == len(py_map) == len(latest)
    assert c_map.survivors() == py_map.survivors() == array("q", sorted(latest.values())).tobytes()

    chosen = data.draw(st.sets(st.sampled_from([r.offset for r in decoded])))
    drop_tombstones = data.draw(st.booleans())
    shift = data.draw(st.sampled_from([0, 0, 5, -(2**33), 2**40]))
    off_shift = data.draw(st.sampled_from([0, 0, 3, 70_000]))
    by_offsets = array("q", sorted(chosen)).tobytes()
    c_out = _speedups.filter_records(body, count, h.base_offset, by_offsets, drop_tombstones, shift, off_shift)
    py_out = compaction.py_filter_records(body, count, h.base_offset, by_offsets, drop_tombstones, shift,
                                          off_shift)
    assert c_out == py_out
    stays = [r for r in decoded if r.offset in chosen and not (drop_tombstones and r.value is None)]
    assert c_out[1:3] == (len(stays), sum(r.value is None for r in stays))

    every = _speedups.filter_records(body, count, h.base_offset, None, False, shift, off_shift)
    assert every == compaction.py_filter_records(body, count, h.base_offset, None, False, shift, off_shift)
    assert every[1] == count

    # by the map: a batch cleaned before keeps the keyed records whose key a later section lacks
    later_keys = data.draw(st.sets(st.sampled_from([r.key for r in decoded if r.key is not None] or [b"z"]),
                                   min_size=1))
    c_later, py_later = _speedups.OffsetMap(100, seed), compaction.PyOffsetMap(100, seed)
    later = _batch([(k, b"new", [], 0) for k in sorted(later_keys)], Compression.NONE)
    lh = parse_header(later)
    for m in (c_later, py_later):
        m.add(record_body(lh, later), lh.record_count, 5_000)
    c_out = _speedups.filter_records(body, count, h.base_offset, c_later, drop_tombstones, shift, off_shift)
    assert c_out == compaction.py_filter_records(body, count, h.base_offset, py_later, drop_tombstones, shift,
                                                 off_shift)
    assert c_out[1] == sum(1 for r in decoded if r.key is not None and r.key not in later_keys
                           and not (drop_tombstones and r.value is None))


def test_a_malformed_body_is_refused_by_both() -> None:
    batch = _batch([(b"k", b"v" * 50, [], 0), (b"k", b"v" * 50, [], 0)], Compression.NONE)
    body = batch[61:-10]  # the last record cut short
    with pytest.raises(CorruptMessage):
        _speedups.keyless(body, 2)
    with pytest.raises(CorruptMessage):
        compaction.py_keyless(body, 2)
    for walk in (_speedups.filter_records, compaction.py_filter_records):
        with pytest.raises(CorruptMessage):
            walk(body, 2, 0, b"", False, 0, 0)
    with pytest.raises(CorruptMessage):
        _speedups.OffsetMap(10, os.urandom(16)).add(body, 2, 0)
    with pytest.raises(CorruptMessage):
        compaction.PyOffsetMap(10, os.urandom(16)).add(body, 2, 0)


def test_a_full_offset_map_refuses_a_new_key_in_both() -> None:
    batch = _batch([(b"a", b"1", [], 0), (b"b", b"2", [], 0)], Compression.NONE)
    h = parse_header(batch)
    for m in (_speedups.OffsetMap(1, os.urandom(16)), compaction.PyOffsetMap(1, os.urandom(16))):
        with pytest.raises(OverflowError):
            m.add(record_body(h, batch), 2, 0)


def test_an_offset_map_that_grows_keeps_every_key() -> None:
    """The C map starts at 4,096 slots and doubles: 20,000 keys over 40 batches move it four times;
    a last batch updates some of them."""
    seed = os.urandom(16)
    c_map, py_map = _speedups.OffsetMap(20_000, seed), compaction.PyOffsetMap(20_000, seed)
    for n in range(41):
        keys = [b"key-%d" % (n * 500 + i if n < 40 else i * 7) for i in range(500)]
        batch = _batch([(k, b"v", [], 0) for k in keys], Compression.NONE)
        h = parse_header(batch)
        for m in (c_map, py_map):
            m.add(record_body(h, batch), h.record_count, n * 500)
    assert len(c_map) == len(py_map) == 20_000
    assert c_map.survivors() == py_map.survivors()
