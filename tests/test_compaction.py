"""Compacted topics: the batch rewrite, keyless records refused, the log cleaner and readers across
its gaps, with real Kafka clients."""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.client import Client
from gateway.clock import now_ms
from gateway.domain.compaction import LogCleaner, PassResult, Policy
from gateway.domain.topic_configs import Change, Op
from gateway.errors import InvalidConfig, InvalidRecord
from gateway.formats.records import (
    ATTR_DELETE_HORIZON,
    BatchBuilder,
    Compression,
    build_batch,
    delete_horizon,
    filter_batch,
    iter_records,
    join_batches,
    joinable,
    keyless_record,
    parse_header,
)
from gateway.server.gateway import Gateway
from gateway.store import keys
from gateway.store.connection import RedisClient
from tests.conftest import (
    GatewayProcess,
    admin_url,
    eventually,
    kafka_bootstrap,
    native_url,
    running_gateway,
    test_config,
)
from tests.kafka_clients import Stored, consume, produce

pytestmark = pytest.mark.kafka
TIMEOUT = 20


def _batch(records: list[tuple[bytes | None, bytes | None]], codec: Compression = Compression.NONE) -> bytes:
    b = BatchBuilder(codec, producer_id=7, producer_epoch=1, base_sequence=40)
    for i, (key, value) in enumerate(records):
        b.append(value, key, [("h", b"v")], timestamp=1000 + i)
    return b.build()


def _offsets(*offsets: int) -> bytes:
    return array("q", offsets).tobytes()


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD, Compression.SNAPPY])
def test_a_rewritten_batch_keeps_offsets_sequence_and_span(codec: Compression) -> None:
    batch = bytearray(_batch([(b"a", b"1"), (b"b", b"2"), (b"a", None), (b"c", b"4")], codec))
    batch[:8] = (500).to_bytes(8, "big")
    out = filter_batch(bytes(batch), 500, _offsets(501, 502), now=80_000, delete_retention_ms=10_000)
    assert out.batch is not None and (out.records, out.horizon) == (2, 90_000)
    nh = parse_header(out.batch)  # the CRC checks
    assert (nh.base_offset, nh.last_offset_delta, nh.record_count) == (500, 3, 2)
    assert (nh.producer_id, nh.producer_epoch, nh.base_sequence, nh.compression) == (7, 1, 40, codec)
    assert nh.attributes & ATTR_DELETE_HORIZON and delete_horizon(nh) == 90_000
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(out.batch)]
    assert got == [(501, 1001, b"b", b"2", [("h", b"v")]), (502, 1002, b"a", None, [("h", b"v")])]
    # a second rewrite keeps the horizon the first one set, and after it the tombstone goes
    again = filter_batch(out.batch, 500, _offsets(502), now=85_000, delete_retention_ms=10_000)
    assert again.batch is not None and delete_horizon(parse_header(again.batch)) == 90_000
    assert [r.timestamp for r in iter_records(again.batch)] == [1002]
    assert filter_batch(again.batch, 500, _offsets(502), now=90_000, delete_retention_ms=10_000).batch is None


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_joined_batches_keep_every_record_offset_and_timestamp(codec: Compression) -> None:
    first, second = BatchBuilder(codec), BatchBuilder(codec)
    for i in range(4):
        first.append(b"v%d" % i, b"k%d" % i, [("h", b"x")], timestamp=5_000 + i)
    for i in range(3):
        second.append(None if i == 1 else b"w%d" % i, b"j%d" % i, timestamp=4_000 + 10 * i)  # older than the first
    parts = [(500, first.build()), (504, second.build())]
    assert all(joinable(parse_header(b)) for _, b in parts)
    assert not joinable(parse_header(_batch([(b"a", b"1")])))  # a producer id: its sequence stays its own
    joined = join_batches(parts)
    h = parse_header(joined)  # the CRC checks
    assert (h.last_offset_delta, h.record_count, h.max_timestamp, h.compression) == (6, 7, 5_003, codec)
    records = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(joined, 500)]
    assert records == [(r.offset, r.timestamp, r.key, r.value, r.headers)
                       for base, b in parts for r in iter_records(b, base)]


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
    # one bad record: librdkafka gives the whole batch the partition's error (tests/test_kafka_record_errors.py)
    assert len(errors) == 2 and all(e is not None and e.code() == ck.KafkaError.INVALID_RECORD for e in errors)
    lo, hi = ck.Consumer({"bootstrap.servers": bs, "group.id": "g"}).get_watermark_offsets(
        ck.TopicPartition("table", 0), timeout=TIMEOUT)
    assert (lo, hi) == (0, 0)  # nothing of the batch was written


async def test_a_record_without_a_key_is_refused_with_its_batch(gateway: Gateway) -> None:
    await asyncio.to_thread(_produce_keyless, kafka_bootstrap(gateway))
    [done] = await gateway.services.log.append([("table", 0, _batch([(b"a", b"1"), (None, b"2")], Compression.LZ4))])
    assert isinstance(done.result, InvalidRecord)
    assert done.result.record_errors == [(1, "Compacted topic cannot accept message without key in topic partition "
                                              "table-0")]
    assert str(done.result) == (
        "One or more records have been rejected due to 1 record errors in total, and only showing the first three "
        "errors at most: [RecordError(batchIndex=1, message='Compacted topic cannot accept message without key in "
        "topic partition table-0')]")
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
    placed = await produce("confluent", bs, topic, messages,
                           **{"batch.num.messages": 25, "queue.buffering.max.messages": max(updates, 100_000)})
    [(_, head)] = await produce("confluent", bs, topic, [(b"head", b"h")])
    latest: dict[bytes | None, Stored] = {}
    for (p, offset), (key, value) in zip(placed, messages, strict=True):
        latest[key] = (p, offset, key, value)
    return sorted(latest.values(), key=lambda s: s[1]) + [(0, head, b"head", b"h")]


@pytest.mark.parametrize(("redis_url", "updates", "key_count"), [("single", 200_000, 2_000), ("cluster", 400, 12)],
                         indirect=["redis_url"])
async def test_a_changelog_compacts_to_the_latest_value_per_key(quiet: Gateway, updates: int, key_count: int) -> None:
    """A changelog of 200,000 updates over 2,000 keys on one Redis (about 10 s), a small one
    on the cluster."""
    bs = kafka_bootstrap(quiet)
    await _create(quiet, "changelog")
    expected = await _changelog(bs, "changelog", updates, key_count)
    done = await _cleaner(quiet).clean("changelog", 0, Policy.of(await quiet.services.log.topic_config("changelog")))
    assert done is not None and done.records_dropped == updates - key_count
    clients = ("confluent", "aiokafka", "kafka-python")
    for client in clients:
        assert await consume(client, bs, "changelog", 0, 0, len(expected)) == expected, client
    # from the middle of a batch (of 25), from inside batches that went whole,
    # and from the middle of a batch at a record that went
    starts = [(client, expected[2][1]) for client in clients] + [
        ("confluent", updates // 4), ("aiokafka", updates - key_count - 20)]
    for client, start in starts:
        survivors = [s for s in expected if s[1] >= start]
        assert await consume(client, bs, "changelog", 0, start, len(survivors)) == survivors, (client, start)
    # a second pass with nothing new to clean leaves the log as it is
    assert await _cleaner(quiet).clean("changelog", 0, Policy.of(await quiet.services.log.topic_config("changelog"))) is None
    assert await quiet.services.log.bounds("changelog", 0) == (0, updates + 1)


@pytest.fixture
def python_walks(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The pure-Python record walks in place of the C ones, as on a machine without a compiler; counts
    their calls, so a test shows they ran."""
    from gateway.domain import compaction as cleaner
    from gateway.formats import compaction as walks
    from gateway.formats import records

    calls = {"keyless": 0, "filter": 0, "map": 0}

    def counted(name: str, fn: Any) -> Any:
        def call(*args: Any) -> Any:
            calls[name] += 1
            return fn(*args)
        return call

    monkeypatch.setattr(records, "keyless", counted("keyless", walks.py_keyless))
    monkeypatch.setattr(records, "filter_records", counted("filter", walks.py_filter_records))
    monkeypatch.setattr(cleaner, "OffsetMap", counted("map", walks.PyOffsetMap))
    return calls


async def test_the_python_walks_refuse_and_clean_as_the_c_ones(quiet: Gateway, python_walks: dict[str, int]) -> None:
    """Without the C extension the package runs the Python walks: keyless records refused, a changelog
    with a tombstone cleaned to what the C walks leave (the test above), read back by a real client."""
    bs = kafka_bootstrap(quiet)
    await _create(quiet, "py-changelog")
    [refused] = await quiet.services.log.append([("py-changelog", 0, _batch([(b"a", b"1"), (None, b"2")]))])
    assert isinstance(refused.result, InvalidRecord)
    expected = await _changelog(bs, "py-changelog", 2_000, 40)
    [(_, gone)] = await produce("confluent", bs, "py-changelog", [(b"k7", None)])  # a tombstone for k7
    expected = [s for s in expected if s[2] != b"k7"] + [(0, gone, b"k7", None)]
    [(_, head)] = await produce("confluent", bs, "py-changelog", [(b"head", b"again")])  # the new active head:
    expected.append((0, head, b"head", b"again"))  # not cleaned, nor does it supersede the older "head" (Kafka's)
    done = await _pass(quiet, "py-changelog")
    assert done is not None and done.records_dropped == 2_000 + 3 - len(expected)
    assert await consume("confluent", bs, "py-changelog", 0, 0, len(expected)) == sorted(expected, key=lambda s: s[1])
    assert all(python_walks.values()), python_walks


async def _pass(gw: Gateway, topic: str) -> PassResult | None:
    return await _cleaner(gw).clean(topic, 0, Policy.of(await gw.services.log.topic_config(topic)))


async def test_tombstones_go_after_delete_retention_and_not_before(quiet: Gateway) -> None:
    bs = kafka_bootstrap(quiet)
    for topic, retention in (("soon", "0"), ("later", "3600000")):
        await _create(quiet, topic, **{"delete.retention.ms": retention})
        placed = await produce("confluent", bs, topic, [(b"a", b"1"), (b"b", b"2"), (b"a", None)])
        await produce("confluent", bs, topic, [(b"head", b"h")])
        done = await _pass(quiet, topic)  # the first pass over the tombstone keeps it and sets its horizon
        assert done is not None and done.records_dropped == 1
        assert await consume("confluent", bs, topic, 0, 0, 3) == [
            (0, placed[1][1], b"b", b"2"), (0, placed[2][1], b"a", None), (0, 3, b"head", b"h")]
    assert await _pass(quiet, "later") is None  # its horizon is an hour away: nothing is due
    assert await consume("aiokafka", bs, "later", 0, 0, 3) == [(0, 1, b"b", b"2"), (0, 2, b"a", None),
                                                              (0, 3, b"head", b"h")]
    done = await _pass(quiet, "soon")
    assert done is not None and done.records_dropped == 1
    assert await consume("aiokafka", bs, "soon", 0, 0, 2) == [(0, 1, b"b", b"2"), (0, 3, b"head", b"h")]


def _transactions(bs: str) -> list[tuple[int, bytes]]:
    p = ck.Producer({"bootstrap.servers": bs, "transactional.id": "table-writer"})
    p.init_transactions(TIMEOUT)
    offsets: list[tuple[int, bytes]] = []
    for records, commit in (([(b"k1", b"a"), (b"k2", b"b")], True), ([(b"k1", b"x"), (b"k3", b"y")], False),
                            ([(b"k4", b"c")], True)):
        p.begin_transaction()
        for key, value in records:
            p.produce("txns", value, key, on_delivery=lambda _e, m: offsets.append((m.offset(), m.value())))
        p.flush(TIMEOUT)
        (p.commit_transaction if commit else p.abort_transaction)(TIMEOUT)
    return offsets


async def test_aborted_transactions_go_and_read_committed_reads_are_unchanged(quiet: Gateway) -> None:
    bs = kafka_bootstrap(quiet)
    await _create(quiet, "txns")
    offsets = dict((v, o) for o, v in await asyncio.to_thread(_transactions, bs))
    [(_, head)] = await produce("confluent", bs, "txns", [(b"head", b"h")])
    committed = [(0, offsets[b"a"], b"k1", b"a"), (0, offsets[b"b"], b"k2", b"b"), (0, offsets[b"c"], b"k4", b"c"),
                 (0, head, b"head", b"h")]
    rc = {"isolation.level": "read_committed"}
    assert await consume("confluent", bs, "txns", 0, 0, 4, **rc) == committed
    assert len(await consume("aiokafka", bs, "txns", 0, 0, 6)) == 6  # the aborted two, read uncommitted
    done = await _pass(quiet, "txns")
    assert done is not None and done.records_dropped == 2  # k1=x did not supersede the committed k1=a
    assert await consume("confluent", bs, "txns", 0, 0, 4, **rc) == committed
    assert await consume("aiokafka", bs, "txns", 0, 0, 4, isolation_level="read_committed") == committed
    assert await consume("aiokafka", bs, "txns", 0, 0, 4) == committed  # the aborted data is gone
    # the transactional producer's state survived: it goes on where it was
    more = await asyncio.to_thread(_transactions, bs)
    assert [o for o, _ in more] == [head + 1 + i for i in (0, 1, 3, 4, 6)]


async def test_a_pass_stopped_half_way_changes_nothing_and_the_next_finishes(quiet: Gateway) -> None:
    bs = kafka_bootstrap(quiet)
    await _create(quiet, "halfway")
    expected = await _changelog(bs, "halfway", 200, 5)
    everything = await consume("confluent", bs, "halfway", 0, 0, 201)
    store = quiet.services.log.store.cleaner
    # what a pass killed after its first writes leaves behind: a part of the next generation
    await store.begin("halfway", 0, -1, 0)
    batches = [b async for b in store.scan("halfway", 0)]
    await store.add("halfway", 0, -1, 1, batches[:3])
    assert await consume("aiokafka", bs, "halfway", 0, 0, 201) == everything
    assert await _pass(quiet, "halfway") is not None
    assert await consume("aiokafka", bs, "halfway", 0, 0, len(expected)) == expected


async def test_a_reader_during_cleaning_sees_every_survivor_once(quiet: Gateway) -> None:
    bs = kafka_bootstrap(quiet)
    logs = quiet.services.log
    await _create(quiet, "busy", **{"min.cleanable.dirty.ratio": "0.01"})
    seen: list[tuple[int, bytes | None, bytes | None]] = []

    async def read_all(upto: int) -> None:
        offset = len(seen) and seen[-1][0] + 1
        while offset < upto:
            sl = await logs.read("busy", 0, offset, 2)
            for e in sl.entries:
                seen.extend((r.offset, r.key, r.value) for r in iter_records(e.batch, e.base_offset)
                            if r.offset >= offset)
            offset = sl.entries[-1].next_offset if sl.entries else offset

    expected: list[Stored] = []
    for _ in range(3):  # three generations switch under the reader
        before = expected[-1:]  # the last round's head: the last pass had no later record of its key
        expected = await _changelog(bs, "busy", 150, 7)
        hw = (await logs.bounds("busy", 0))[1]
        await asyncio.gather(read_all(hw), _pass(quiet, "busy"))
    offsets = [o for o, _, _ in seen]
    assert offsets == sorted(set(offsets))  # each once, in order
    assert {(0, o, k, v) for o, k, v in seen} >= set(expected)  # every survivor, maybe superseded ones too
    survivors = before + expected
    assert await consume("confluent", bs, "busy", 0, 0, len(survivors)) == survivors


async def test_delayed_delivery_is_refused_on_compacted_topics(quiet: Gateway) -> None:
    logs = quiet.services.log
    with pytest.raises(InvalidConfig, match="delayed.delivery.enable cannot be true"):
        await logs.create_topic("late", 1, {"cleanup.policy": "compact", "delayed.delivery.enable": "true"})
    await logs.create_topic("late", 1, {"delayed.delivery.enable": "true"})
    with pytest.raises(InvalidConfig, match="delayed.delivery.enable cannot be true"):
        await logs.alter_config("late", [Change("cleanup.policy", Op.APPEND, "compact")])


async def test_the_policy_changes_both_ways_on_a_live_topic(quiet: Gateway) -> None:
    bs = kafka_bootstrap(quiet)
    logs = quiet.services.log
    await logs.create_topic("live", 1)
    await produce("confluent", bs, "live", [(None, b"keyless is fine here")])
    await logs.alter_config("live", [Change("cleanup.policy", Op.APPEND, "compact")])
    assert (await logs.topic_config("live"))["cleanup.policy"] == "delete,compact"
    expected = await _changelog(bs, "live", 60, 3)
    assert await _pass(quiet, "live") is not None
    # a record without a key, from before the policy had compact, goes as Kafka's cleaner drops one
    assert await consume("aiokafka", bs, "live", 0, 0, 4) == expected
    await logs.alter_config("live", [Change("cleanup.policy", Op.SUBTRACT, "compact")])
    await produce("confluent", bs, "live", [(None, b"keyless again")])
    await logs.alter_config("live", {"retention.ms": "0"})
    await logs.enforce_retention()  # the cleaned part goes too: every batch is past retention
    assert await logs.bounds("live", 0) == (63, 63)


@pytest.mark.parametrize("point", ["begun", "added", "switching"])
async def test_a_gateway_killed_mid_clean_leaves_a_log_the_next_one_cleans(
    point: str, redis_url: str, raw_redis: RedisClient, tmp_path: Path
) -> None:
    """SIGKILL at three steps of a pass (`debug_cleaner_stop_at`): its next generation emptied, a first
    group of batches written to it (over 4 MB of survivors: the pass writes in groups), all of them
    written before the switch. Readers see the log as it was; the next gateway's pass cleans it."""
    value = b"x" * 2000
    messages = [(b"k%d" % (i % 2600), value + b"%d" % i) for i in range(3000)]  # 2,600 survivors, 5 MB
    async with running_gateway(test_config(redis_url, cleaner_interval=3600)) as gw:
        bs = kafka_bootstrap(gw)
        await _create(gw, "big")
        placed = await produce("confluent", bs, "big", messages, **{"batch.num.messages": 20})
        [(_, head)] = await produce("confluent", bs, "big", [(b"head", b"h")])
        everything = await consume("confluent", bs, "big", 0, 0, 3001)
    assert everything == [(0, o, k, v) for (_, o), (k, v) in zip(placed, messages, strict=True)] + [
        (0, head, b"head", b"h")]
    expected = sorted({k: (0, o, k, v) for (_, o), (k, v) in zip(placed, messages, strict=True)}.values(),
                      key=lambda s: s[1]) + [(0, head, b"head", b"h")]
    building = keys.clean_log("big", 0, 1)
    args = ["--cleaner-interval", "0.05", "--lease-ms", "1500"]
    first = GatewayProcess(tmp_path / "one", redis_url=redis_url, args=[*args, "--debug-cleaner-stop-at", point])
    second = GatewayProcess(tmp_path / "two", redis_url=redis_url, args=args)
    try:
        await asyncio.to_thread(first.start)
        await asyncio.wait_for(asyncio.to_thread(first.output_until, f"log cleaner stopped at {point}"), TIMEOUT)
        first.kill()
        built = await raw_redis.xlen(building)  # the batches the killed pass had written
        assert await raw_redis.hget(keys.meta("big", 0), "cg") is None  # no switch: the log is as it was
        async with running_gateway(test_config(redis_url, cleaner_interval=3600)) as gw:
            assert await consume("confluent", kafka_bootstrap(gw), "big", 0, 0, 3001) == everything
        await asyncio.to_thread(second.start)
        await eventually(lambda: raw_redis.hget(keys.meta("big", 0), "cg"), TIMEOUT, "a pass of the next gateway")
        assert await consume("aiokafka", second.kafka_bootstrap, "big", 0, 0, len(expected)) == expected
        cleaned = await raw_redis.xlen(building)  # the same generation, built whole by the next pass
        assert {"begun": built == 0, "added": 0 < built < cleaned, "switching": built == cleaned}[point], (built,
                                                                                                      cleaned)
    finally:
        for gp in (first, second):
            if gp.proc is not None and gp.proc.poll() is None:
                gp.stop()


async def _records(gw: Gateway, topic: str) -> list[Stored]:
    """Every record of partition 0 as a reader finds it, through the gateway's read path."""
    logs, out, offset = gw.services.log, list[Stored](), 0
    while True:
        sl = await logs.read(topic, 0, offset, 16)
        out += [(0, r.offset, r.key, r.value) for e in sl.entries
                for r in iter_records(e.batch, e.base_offset) if r.offset >= offset]
        if not sl.entries or sl.entries[-1].next_offset >= sl.high_watermark:
            return out
        offset = sl.entries[-1].next_offset


@pytest.mark.parametrize("redis_url", ["single", "cluster"], indirect=True)
async def test_the_cleaner_role_compacts_while_producers_write(redis_url: str) -> None:
    async with running_gateway(test_config(redis_url, cleaner_interval=0.05, lease_ms=1500)) as gw:
        bs = kafka_bootstrap(gw)
        await _create(gw, "roles")
        expected = await _changelog(bs, "roles", 300, 9)

        async def compacted() -> bool:
            return await _records(gw, "roles") == expected

        await eventually(compacted, TIMEOUT, "the cleaner role's passes")
        assert await consume("aiokafka", bs, "roles", 0, 0, len(expected)) == expected
        assert _cleaner(gw).passes >= 1


async def test_cleaner_passes_are_counted_on_the_metrics(quiet: Gateway) -> None:
    await _create(quiet, "counted")
    await _changelog(kafka_bootstrap(quiet), "counted", 50, 2)
    done = await _pass(quiet, "counted")
    assert done is not None and done.bytes_removed > 0
    async with aiohttp.ClientSession() as http, http.get(f"{admin_url(quiet)}/metrics") as resp:
        text = await resp.text()
    assert 'gateway_cleaner_passes_total{topic="counted"} 1.0' in text
    assert f'gateway_cleaner_bytes_removed_total{{topic="counted"}} {float(done.bytes_removed)}' in text


async def test_offsets_for_times_look_below_the_clean_boundary(quiet: Gateway) -> None:
    logs = quiet.services.log
    await _create(quiet, "timed")
    for ts, records in ((1000, [(b"a", b"1"), (b"b", b"1")]), (2000, [(b"a", b"2")]), (3000, [(b"c", b"3")]),
                        (4000, [(b"d", b"4")])):
        [done] = await logs.append([("timed", 0, build_batch([(k, v, []) for k, v in records], timestamp=ts))])
        assert not isinstance(done.result, Exception)
    assert await _pass(quiet, "timed") is not None
    assert [r[1] for r in await _records(quiet, "timed")] == [1, 2, 3, 4]  # offset 0 (a=1) went
    found = [await logs.offset_for_time("timed", 0, ts) for ts in (500, 1500, 2500, 3500, 4500)]
    assert found == [(1, 1000), (2, 2000), (3, 3000), (4, 4000), None]

    def offsets_for_times() -> list[int]:
        consumer = ck.Consumer({"bootstrap.servers": kafka_bootstrap(quiet), "group.id": "times"})
        try:
            return [consumer.offsets_for_times([ck.TopicPartition("timed", 0, ts)], timeout=TIMEOUT)[0].offset
                    for ts in (500, 1500, 3500)]  # one partition once per request
        finally:
            consumer.close()

    assert await asyncio.to_thread(offsets_for_times) == [1, 2, 4]


async def test_the_admin_api_shows_each_partitions_cleaner_state(quiet: Gateway) -> None:
    await _create(quiet, "shown")
    await _changelog(kafka_bootstrap(quiet), "shown", 40, 2)

    async def described() -> dict[str, Any]:
        async with aiohttp.ClientSession() as http, http.get(f"{admin_url(quiet)}/admin/v2/topics/shown") as resp:
            assert resp.status == 200
            return cast(dict[str, Any], (await resp.json())["partitions"][0]["cleaner"])

    before = await described()
    assert (before["clean_boundary"], before["dirty_ratio"], before["passes"], before["last_clean_ms"]) == (0, 1.0, 0, None)
    done = await _pass(quiet, "shown")
    assert done is not None
    after = await described()
    assert (after["clean_boundary"], after["passes"], after["bytes_reclaimed"]) == (40, 1, done.bytes_removed)
    assert after["dirty_ratio"] < 0.5 and after["last_clean_ms"] is not None


async def test_more_keys_than_the_map_holds_are_cleaned_over_several_passes(quiet: Gateway) -> None:
    await _create(quiet, "wide", **{"min.cleanable.dirty.ratio": "0"})
    expected = await _changelog(kafka_bootstrap(quiet), "wide", 300, 30)
    small = LogCleaner(quiet.services.log, max_keys=40)  # two 25-record batches fill it
    policy = Policy.of(await quiet.services.log.topic_config("wide"))
    ends = []
    while (done := await small.clean("wide", 0, policy)) is not None:
        ends.append(done.cleaned_to)
    assert ends[0] == 25 and ends[-1] == 300 and len(ends) > 2  # each pass as far as its map reached
    assert await _records(quiet, "wide") == expected


async def test_compact_delete_applies_retention_to_the_cleaned_part(quiet: Gateway) -> None:
    logs = quiet.services.log
    await logs.create_topic("both", 1, {"cleanup.policy": "compact,delete", "retention.ms": "-1"})
    for ts, key in ((1000, b"a"), (2000, b"b"), (3000, b"c"), (now_ms(), b"d")):
        await logs.append([("both", 0, build_batch([(key, b"v", [])], timestamp=ts))])
    assert await _pass(quiet, "both") is not None
    await logs.alter_config("both", {"retention.ms": str(now_ms() - 2500)})  # a and b are past it
    await logs.enforce_retention()
    assert await logs.bounds("both", 0) == (0, 4)  # the retention role leaves the cleaned part to the cleaner
    assert await _pass(quiet, "both") is not None
    assert await logs.bounds("both", 0) == (2, 4)
    assert [(r[1], r[2]) for r in await _records(quiet, "both")] == [(2, b"c"), (3, b"d")]


async def test_a_native_subscription_reads_a_compacted_log_and_its_acks_cross_the_gaps(quiet: Gateway) -> None:
    await _create(quiet, "native")
    expected = await _changelog(kafka_bootstrap(quiet), "native", 100, 4)
    assert await _pass(quiet, "native") is not None
    client = await Client.connect(native_url(quiet))
    try:
        consumer = await client.subscribe("native", "s", "shared", "earliest")
        got = [await consumer.receive(5) for _ in expected]
        assert [(m.offset, m.key, m.value) for m in got] == [(o, k, v) for _, o, k, v in expected]
        for m in got:
            await consumer.acknowledge(m)
        await consumer.close()

        async def caught_up() -> bool:  # every offset acked: the removed ones with the records read
            positions = await quiet.services.log.store.subscriptions.positions("native", range(1))
            return positions["s"][0] == 101

        await eventually(caught_up, TIMEOUT, "the subscription's cursor at the end of the log")
    finally:
        await client.close()


def _table(records: list[Stored]) -> dict[bytes | None, bytes]:
    """What an application keeps of a changelog: the latest value per key, a tombstone deleting it."""
    table: dict[bytes | None, bytes] = {}
    for _, _, key, value in records:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


async def test_a_table_rebuilt_from_the_compacted_topic_after_a_restart_is_the_same(redis_url: str) -> None:
    messages: list[tuple[bytes | None, bytes | None]] = [
        (b"user-%d" % (i % 15), None if i % 7 == 0 else b"v%d" % i) for i in range(200)]
    async with running_gateway(test_config(redis_url, cleaner_interval=3600)) as gw:
        bs = kafka_bootstrap(gw)
        await _create(gw, "users")
        await produce("confluent", bs, "users", messages, **{"batch.num.messages": 20})
        await produce("confluent", bs, "users", [(b"head", b"h")])
        before = _table(await consume("aiokafka", bs, "users", 0, 0, 201))
        assert await _pass(gw, "users") is not None
    async with running_gateway(test_config(redis_url, cleaner_interval=3600)) as gw:
        survivors = await _records(gw, "users")
        assert len(survivors) < 30  # 15 keys and the head, tombstones kept until their horizon
        assert _table(await consume("confluent", kafka_bootstrap(gw), "users", 0, 0, len(survivors))) == before


async def test_event_time_watermarks_are_unchanged_by_cleaning(quiet: Gateway) -> None:
    logs, wm = quiet.services.log, quiet.services.watermark
    await _create(quiet, "marked")
    await logs.append([("marked", 0, build_batch([(b"a", b"1", [])]))])
    [marker] = await wm.send("marked", "sensor", 5000)
    await logs.append([("marked", 0, build_batch([(b"a", b"2", [])]))])
    await logs.append([("marked", 0, build_batch([(b"head", b"h", [])]))])
    seen = {o: (await wm.at("marked", {0: o}))[0].watermark for o in (0, 1, 2, 3, -1)}
    assert seen[-1] == 5000 and marker == 1
    assert await _pass(quiet, "marked") is not None
    assert {o: (await wm.at("marked", {0: o}))[0].watermark for o in (0, 1, 2, 3, -1)} == seen
    # the marker stays at its offset; Kafka consumers skip it as ever
    assert await consume("aiokafka", kafka_bootstrap(quiet), "marked", 0, 0, 2) == [(0, 2, b"a", b"2"),
                                                                                 (0, 3, b"head", b"h")]


async def test_the_cleaner_hands_over_between_gateways(redis_url: str) -> None:
    cfg = {"cleaner_interval": 0.05, "lease_ms": 1500}

    async def compacted(expected: list[Stored], gw: Gateway) -> bool:
        return await _records(gw, "handed") == expected

    a = Gateway(test_config(redis_url, **cfg))
    await a.start()
    try:
        async with running_gateway(test_config(redis_url, **cfg)) as b:
            await _create(a, "handed")
            first = await _changelog(kafka_bootstrap(a), "handed", 100, 5)
            await eventually(lambda: compacted(first, a), TIMEOUT, "the first gateway's passes")
            assert _cleaner(a).passes >= 1 and _cleaner(b).passes == 0  # one gateway holds the role
            await a.stop()  # a clean stop hands the role on at once
            second = await _changelog(kafka_bootstrap(b), "handed", 100, 5)
            await eventually(lambda: compacted([first[-1], *second], b), TIMEOUT, "the second gateway's passes")
            assert _cleaner(b).passes >= 1
    finally:
        await a.stop()
