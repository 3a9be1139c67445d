"""Compacted topics: the batch rewrite, keyless records refused, the log cleaner and readers across
its gaps, with real Kafka clients."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.domain.compaction import LogCleaner, Policy
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
from tests.conftest import kafka_bootstrap, running_gateway, test_config
from tests.kafka_clients import Stored, consume, produce

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


@pytest.fixture
async def quiet(redis_url: str) -> AsyncIterator[Gateway]:
    """A gateway whose cleaner role waits an hour: the tests run the passes themselves."""
    async with running_gateway(test_config(redis_url, cleaner_interval=3600)) as gw:
        yield gw


def _cleaner(gw: Gateway) -> LogCleaner:
    assert gw.cleaner is not None
    return gw.cleaner


async def _create(gw: Gateway, topic: str, **config: str) -> None:
    await gw.services.log.create_topic(topic, 1, {"cleanup.policy": "compact", **config})


async def _changelog(bs: str, topic: str, updates: int, keys: int) -> list[Stored]:
    """`updates` records over `keys` keys in batches of 25, then one record of its own (the active
    head, which no pass cleans); returns what each consumer should read back after a clean."""
    messages = [(b"k%d" % (i % keys), b"v%d" % i) for i in range(updates)]
    placed = await produce("confluent", bs, topic, messages, **{"batch.num.messages": 25})
    [(_, head)] = await produce("confluent", bs, topic, [(b"head", b"h")])
    latest: dict[bytes | None, Stored] = {}
    for (p, offset), (key, value) in zip(placed, messages, strict=True):
        latest[key] = (p, offset, key, value)
    return sorted(latest.values(), key=lambda s: s[1]) + [(0, head, b"head", b"h")]


@pytest.mark.parametrize("redis_url", ["single", "cluster"], indirect=True)
async def test_a_changelog_compacts_to_the_latest_value_per_key(quiet: Gateway) -> None:
    bs = kafka_bootstrap(quiet)
    await _create(quiet, "changelog")
    expected = await _changelog(bs, "changelog", 400, 12)
    done = await _cleaner(quiet).clean("changelog", 0, Policy.of(await quiet.services.log.topic_config("changelog")))
    assert done is not None and done.records_dropped == 400 - 12
    for client in ("confluent", "aiokafka"):
        assert await consume(client, bs, "changelog", 0, 0, len(expected)) == expected, client
    # from inside batches that went whole, from a record that went and from the middle of a batch
    for client, start in (("confluent", 100), ("aiokafka", 380), ("confluent", expected[2][1])):
        survivors = [s for s in expected if s[1] >= start]
        assert await consume(client, bs, "changelog", 0, start, len(survivors)) == survivors, (client, start)
    # a second pass with nothing new to clean leaves the log as it is
    assert await _cleaner(quiet).clean("changelog", 0, Policy.of(await quiet.services.log.topic_config("changelog"))) is None
    assert await quiet.services.log.bounds("changelog", 0) == (0, 401)
