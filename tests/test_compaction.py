"""Compacted topics: the batch rewrite, keyless records refused, the log cleaner and readers across
its gaps, with real Kafka clients."""

from __future__ import annotations

import asyncio

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.errors import InvalidRecord
from gateway.formats.records import (
    ATTR_DELETE_HORIZON,
    BatchBuilder,
    Compression,
    delete_horizon,
    iter_records,
    keyless_record,
    parse_header,
    raw_records,
    rewrite_batch,
)
from gateway.server.gateway import Gateway
from tests.conftest import kafka_bootstrap

pytestmark = pytest.mark.kafka
TIMEOUT = 20


def _batch(records: list[tuple[bytes | None, bytes | None]], codec: Compression = Compression.NONE) -> bytes:
    b = BatchBuilder(codec, producer_id=7, producer_epoch=1, base_sequence=40)
    for i, (key, value) in enumerate(records):
        b.append(value, key, [("h", b"v")], timestamp=1000 + i)
    return b.build()


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD, Compression.SNAPPY])
def test_a_rewritten_batch_keeps_offsets_sequence_and_span(codec: Compression) -> None:
    batch = bytearray(_batch([(b"a", b"1"), (b"b", b"2"), (b"a", None), (b"c", b"4")], codec))
    batch[:8] = (500).to_bytes(8, "big")
    h, recs = raw_records(bytes(batch))
    out = rewrite_batch(h, [recs[1], recs[2]], delete_horizon=90_000)
    nh = parse_header(out)  # the CRC checks
    assert (nh.base_offset, nh.last_offset_delta, nh.record_count) == (500, 3, 2)
    assert (nh.producer_id, nh.producer_epoch, nh.base_sequence, nh.compression) == (7, 1, 40, codec)
    assert nh.attributes & ATTR_DELETE_HORIZON and delete_horizon(nh) == 90_000
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(out)]
    assert got == [(501, 1001, b"b", b"2", [("h", b"v")]), (502, 1002, b"a", None, [("h", b"v")])]
    # a second rewrite keeps the horizon the first one set
    h2, recs2 = raw_records(out)
    again = parse_header(rewrite_batch(h2, recs2[1:]))
    assert delete_horizon(again) == 90_000 and [r.timestamp for r in iter_records(rewrite_batch(h2, recs2[1:]))] == [1002]


def test_keyless_records_are_found_in_any_codec() -> None:
    assert keyless_record(_batch([(b"a", b"1"), (b"b", b"2")])) == -1
    assert keyless_record(_batch([(b"a", b"1"), (None, b"2")], Compression.GZIP)) == 1


def _produce_keyless(bs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic("table", 1, config={"cleanup.policy": "compact"})]).values():
        f.result(timeout=TIMEOUT)
    p = ck.Producer({"bootstrap.servers": bs, "linger.ms": 50, "retries": 0})
    errors: list[ck.KafkaError | None] = []
    p.produce("table", b"kept?", key=b"k", on_delivery=lambda err, _m: errors.append(err))
    p.produce("table", b"no key", on_delivery=lambda err, _m: errors.append(err))  # same batch as the first
    p.flush(TIMEOUT)
    assert len(errors) == 2 and all(e is not None and e.code() == ck.KafkaError.INVALID_RECORD for e in errors)
    lo, hi = ck.Consumer({"bootstrap.servers": bs, "group.id": "g"}).get_watermark_offsets(
        ck.TopicPartition("table", 0), timeout=TIMEOUT)
    assert (lo, hi) == (0, 0)  # nothing of the batch was written


async def test_a_record_without_a_key_is_refused_with_its_batch(gateway: Gateway) -> None:
    await asyncio.to_thread(_produce_keyless, kafka_bootstrap(gateway))
    [done] = await gateway.services.log.append([("table", 0, _batch([(b"a", b"1"), (None, b"2")], Compression.LZ4))])
    assert isinstance(done.result, InvalidRecord)
    assert str(done.result) == "Compacted topic cannot accept message without key in topic partition table-0."
    assert await gateway.services.log.bounds("table", 0) == (0, 0)
