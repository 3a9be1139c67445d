"""The Spark source: offsets planned on the driver, ranges read READ_COMMITTED by tasks, the checkpoint
the only position. The reader's driver-side calls are first exercised directly (Spark calls them
the same way, from a Python process of its own); then real queries run in the shared local Spark.

Spark's calls block, and the gateway under test shares the test's event loop: they run in a thread."""

from __future__ import annotations

import asyncio
import pickle
from datetime import UTC, datetime

import pytest

from gateway.client import Client
from gateway.formats.records import build_batch
from gateway.spark.options import Endpoint, OptionError, SourceOptions
from gateway.spark.source import DataLoss, GatewayStreamReader, RangePartition
from tests.conftest import in_spark, native_url, running_gateway, test_config

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]  # a JVM is slow to start on a busy machine


def stream_reader(gw, **options: str) -> GatewayStreamReader:
    return GatewayStreamReader(SourceOptions.parse({"url": native_url(gw), **options}, streaming=True))


async def rows(reader, start: dict, end: dict) -> list[tuple]:
    """What the tasks of a micro-batch [start, end) read, as (topic, partition, offset, value)."""

    def run() -> list[tuple]:
        out = []
        for part in reader.partitions(start, end):
            part = pickle.loads(pickle.dumps(part))  # as it crosses to an executor
            for batch in reader.read(part):
                d = batch.to_pydict()
                out += zip(d["topic"], d["partition"], d["offset"], d["value"], strict=True)
        return sorted(out)

    return await asyncio.to_thread(run)


async def produce(client: Client, topic: str, n: int, partitions: int, prefix: str = "v") -> None:
    producer = await client.create_producer(topic)
    await asyncio.gather(*(producer.send(f"{prefix}{i}".encode(), partition=i % partitions) for i in range(n)))
    await producer.close()


async def test_options_are_checked_on_the_driver(gateway):
    url = native_url(gateway)
    with pytest.raises(OptionError, match='"url" is required'):
        SourceOptions.parse({"topic": "t"}, streaming=True)
    with pytest.raises(OptionError, match='"topic" is required'):
        SourceOptions.parse({"url": url}, streaming=True)
    with pytest.raises(OptionError, match="startingOffsets"):
        SourceOptions.parse({"url": url, "topic": "t", "startingOffsets": "{not json"}, streaming=True)
    with pytest.raises(OptionError, match="names topics not read"):
        SourceOptions.parse({"url": url, "topic": "t", "startingOffsets": '{"u": {"0": 1}}'}, streaming=True)
    with pytest.raises(OptionError, match="a stream has no end"):
        SourceOptions.parse({"url": url, "topic": "t", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(OptionError, match="maxRecordsPerTrigger"):
        SourceOptions.parse({"url": url, "topic": "t", "maxRecordsPerTrigger": "0"}, streaming=True)
    opts = SourceOptions.parse({"URL": url, "Topic": "a, b,a", "maxRecordsPerTrigger": "5"}, streaming=True)
    assert (opts.topics, opts.starting, opts.max_records_per_trigger) == (("a", "b"), "latest", 5)


async def test_micro_batches_end_at_the_last_stable_offset_and_replay_the_same(gateway, client):
    await gateway.services.log.create_topic("src", 2)
    await produce(client, "src", 6, 2)
    reader = stream_reader(gateway, topic="src", startingOffsets="earliest")
    start = await asyncio.to_thread(reader.initialOffset)
    assert start == {"src": {"0": 0, "1": 0}}
    producer = await client.create_producer("src")
    txn = await client.new_transaction(timeout=30)
    await producer.send(b"in-txn", partition=0, txn=txn)
    await txn.flush()
    await producer.send(b"after-txn", partition=0)
    end = await asyncio.to_thread(reader.latestOffset, start, reader.getDefaultReadLimit())
    assert end == {"src": {"0": 3, "1": 3}}  # partition 0 stops below the open transaction
    first = await rows(reader, start, end)
    assert [r[3] for r in first] == [b"v0", b"v2", b"v4", b"v1", b"v3", b"v5"]
    await txn.commit()
    assert await rows(reader, start, end) == first  # a replayed micro-batch reads the same records
    end2 = await asyncio.to_thread(reader.latestOffset, end, reader.getDefaultReadLimit())
    assert end2 == {"src": {"0": 6, "1": 3}}  # the transaction, the record after it, the marker
    assert [r[3] for r in await rows(reader, end, end2)] == [b"in-txn", b"after-txn"]
    assert reader.reportLatestOffset() == end2


async def test_max_records_per_trigger_shares_the_budget_by_backlog(gateway, client):
    await gateway.services.log.create_topic("lim", 3)
    producer = await client.create_producer("lim")
    for p, n in ((0, 30), (1, 10), (2, 0)):
        await asyncio.gather(*(producer.send(b"x", partition=p) for _ in range(n)))
    reader = stream_reader(gateway, topic="lim", startingOffsets="earliest", maxRecordsPerTrigger="8")
    limit = reader.getDefaultReadLimit()
    offset = await asyncio.to_thread(reader.initialOffset)
    sizes = []
    while True:
        end = await asyncio.to_thread(reader.latestOffset, offset, limit)
        if end == offset:
            break
        batch = await rows(reader, offset, end)
        sizes.append(len(batch))
        assert len(batch) <= 8
        offset = end
    assert sum(sizes) == 40 and sizes[0] == 8
    assert offset == {"lim": {"0": 30, "1": 10, "2": 0}}


async def test_available_now_reads_only_what_was_there_when_it_started(gateway, client):
    await gateway.services.log.create_topic("now", 1)
    await produce(client, "now", 5, 1)
    reader = stream_reader(gateway, topic="now", startingOffsets="earliest")
    await asyncio.to_thread(reader.prepareForTriggerAvailableNow)
    await produce(client, "now", 5, 1, prefix="late")
    await gateway.services.log.add_partitions("now", 2)
    await produce(client, "now", 2, 2, prefix="new")
    start = await asyncio.to_thread(reader.initialOffset)
    end = await asyncio.to_thread(reader.latestOffset, start, reader.getDefaultReadLimit())
    assert end == {"now": {"0": 5, "1": 0}}


async def test_data_loss_fails_the_task_unless_allowed(gateway, client):
    await produce(client, "lost", 6, 1)
    await gateway.services.log.delete_records("lost", 0, 4)
    strict = stream_reader(gateway, topic="lost")
    with pytest.raises(DataLoss, match="failOnDataLoss=false"):
        await rows(strict, {"lost": {"0": 0}}, {"lost": {"0": 6}})
    lenient = stream_reader(gateway, topic="lost", failOnDataLoss="false")
    assert [r[3] for r in await rows(lenient, {"lost": {"0": 0}}, {"lost": {"0": 6}})] == [b"v4", b"v5"]


async def test_watermark_rows_carry_the_broker_watermark_at_the_batch_end(gateway, client):
    await gateway.services.log.create_topic("wm", 2)
    a = await client.create_producer("wm", "sensor-a")
    b = await client.create_producer("wm", "sensor-b")
    reader = stream_reader(gateway, topic="wm", startingOffsets="earliest", emitWatermarks="true")
    limit = reader.getDefaultReadLimit()

    async def batch(start: dict) -> tuple[dict, list[tuple]]:
        end = await asyncio.to_thread(reader.latestOffset, start, limit)

        def run() -> list[tuple]:
            out = []
            for part in reader.partitions(start, end):
                for arrow in reader.read(pickle.loads(pickle.dumps(part))):
                    d = arrow.to_pydict()
                    out += zip(d["offset"], d["value"], d["event_time"], d["topic"], strict=True)
            return sorted(out, key=lambda r: r[0])

        return end, await asyncio.to_thread(run)

    start = await asyncio.to_thread(reader.initialOffset)
    await a.send(b"1", event_time=1_000, partition=0)
    end, rows = await batch(start)
    assert [r[0] for r in rows] == [0]  # no producer in the watermark set yet: no watermark row
    await a.send_watermark(5_000)
    await b.send_watermark(3_000)
    await b.send(b"2", event_time=4_000, partition=1)
    end2, rows = await batch(end)
    wm = [r for r in rows if r[0] == -1]
    assert len(wm) == 1 and wm[0][1] is None and wm[0][3] == "wm"
    assert wm[0][2] == datetime.fromtimestamp(3, UTC)  # the minimum
    assert [r[1] for r in rows if r[0] >= 0] == [b"2"]
    _, replay = await batch(end)
    assert replay == rows  # a replayed micro-batch brings the same watermark
    await b.send_watermark(9_000)
    _, rows = await batch(end2)
    assert [r[2] for r in rows] == [datetime.fromtimestamp(5, UTC)]
    with pytest.raises(OptionError, match="emitWatermarks"):
        SourceOptions.parse({"url": native_url(gateway), "topic": "wm", "emitWatermarks": "true"}, streaming=False)


async def test_a_partition_description_carries_everything_a_task_needs(gateway):
    part = RangePartition(Endpoint(native_url(gateway), "alice", "secret"), "t", 3, 10, 20, True, 1024)
    assert "secret" not in repr(part)  # Spark may log it
    assert pickle.loads(pickle.dumps(part)) == part
    reader = pickle.loads(pickle.dumps(stream_reader(gateway, topic="t")))
    assert reader.opts.topics == ("t",)


# -- real queries ----------------------------------------------------------------------------------


async def test_batch_read_of_committed_records_with_every_column(spark, gateway, client):
    await gateway.services.log.create_topic("batch", 2)
    producer = await client.create_producer("batch")
    await producer.send(b"v", key=b"k", headers={"h": b"1"}, event_time=1_700_000_000_123, partition=1)
    await producer.send(None, partition=0)
    aborted = await client.new_transaction(timeout=30)
    await producer.send(b"gone", partition=0, txn=aborted)
    await aborted.abort()
    await producer.send(b"last", partition=0)

    def load(**options: str) -> list:
        df = spark.read.format("gateway").option("url", native_url(gateway)).option("topic", "batch")
        for k, v in options.items():
            df = df.option(k, v)
        return df.load().orderBy("partition", "offset").collect()

    got = await in_spark(spark, load)
    assert [(r.partition, r.offset, r.value) for r in got] == [(0, 0, None), (0, 3, b"last"), (1, 0, b"v")]
    r = got[2]
    assert (r.key, [(h.key, h.value) for h in r.headers], r.topic) == (b"k", [("h", b"1")], "batch")
    assert r.event_time == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC).astimezone().replace(tzinfo=None)
    assert got[0].event_time is None and got[0].timestamp is not None
    some = await in_spark(spark, load, startingOffsets='{"batch": {"0": 1}}', endingOffsets='{"batch": {"1": 0}}')
    assert [(r.partition, r.offset) for r in some] == [(0, 3)]


async def test_a_tiered_topic_reads_from_offset_0_as_if_never_tiered(spark, redis_url, tmp_path):
    """The source below the local log start (issue 31, KIP-405's promise): the first segment of a
    tiered topic is in the object store alone, yet a batch read returns every record from offset 0
    with the offsets, keys, values, headers and timestamps of the same batches on a topic never tiered."""
    cfg = test_config(redis_url, tier_store=str(tmp_path / "tier"), tier_interval=3600)
    async with running_gateway(cfg) as gw:
        logs = gw.services.log
        # segment.ms of 1 and batches stamped in the past: what is there rolls and is copied at once,
        # however small (a segment need not be a megabyte of records to be one)
        await logs.create_topic("cold", 1, {"remote.storage.enable": "true", "segment.ms": "1",
                                            "local.retention.bytes": "0"})
        await logs.create_topic("warm", 1)

        async def append(firsts: range) -> None:
            for first in firsts:
                batch = build_batch([(b"k%d" % i, b"v" * 100 + b"%d" % i, [("h", b"%d" % i), ("none", None)])
                                     for i in range(first, first + 10)], timestamp=1_700_000_000_000 + first)
                for topic in ("cold", "warm"):
                    [appended] = await logs.append([(topic, 0, batch)])
                    assert not isinstance(appended.result, Exception), appended.result

        await append(range(0, 100, 10))  # 10 batches: a segment in the object store alone
        assert gw.tiering is not None and await gw.tiering.tier_pass() > 10_000
        await append(range(100, 150, 10))  # and the rest, in Redis
        local_start, _ = await logs.tier_bounds("cold", 0)
        assert local_start == 100 and (await logs.bounds("cold", 0)) == (0, 150)

        def load() -> list:  # both topics in one query: one Spark job (sorted here: orderBy is a second)
            rows = spark.read.format("gateway").option("url", native_url(gw)).option("topic", "cold,warm").load()
            return sorted(rows.collect(), key=lambda r: (r.topic, r.offset))

        got = await in_spark(spark, load)
        cold, warm = ([(r.offset, r.key, r.value, [(h.key, h.value) for h in r.headers], r.timestamp)
                       for r in got if r.topic == topic] for topic in ("cold", "warm"))
        assert [r[0] for r in cold] == list(range(150))
        assert cold[149][1:4] == (b"k149", b"v" * 100 + b"149", [("h", b"149"), ("none", None)])
        assert cold == warm


async def test_stream_admits_batches_under_the_limit_and_resumes_from_its_checkpoint(spark, gateway, client, tmp_path):
    await gateway.services.log.create_topic("stream", 2)
    await produce(client, "stream", 30, 2)
    batches: list[list[bytes]] = []

    def run() -> None:
        query = (
            spark.readStream.format("gateway")
            .option("url", native_url(gateway)).option("topic", "stream")
            .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", "8")
            .load()
            .writeStream.foreachBatch(lambda df, _: batches.append([r.value for r in df.collect()]))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120), "the query did not finish"
        assert query.exception() is None

    await in_spark(spark, run)
    assert [len(b) for b in batches] == [8, 8, 8, 6]
    assert sorted(v for b in batches for v in b) == sorted(f"v{i}".encode() for i in range(30))
    batches.clear()
    await produce(client, "stream", 5, 2, prefix="more")
    await in_spark(spark, run)  # the checkpoint holds the offsets: only the new records come
    assert sorted(v for b in batches for v in b) == sorted(f"more{i}".encode() for i in range(5))


async def test_the_documented_filter_stays_above_the_watermark_step(spark, gateway):
    """The README's filter for watermark rows names event_time, so the optimizer leaves it above the
    watermark step; a filter on the offset alone would be moved below it, hiding the rows."""

    def plans() -> tuple[str, str]:
        events = (
            spark.readStream.format("gateway").option("url", native_url(gateway)).option("topic", "t")
            .option("emitWatermarks", "true").load()
            .withWatermark("event_time", "0 seconds")
        )
        documented = events.where("offset >= 0 OR event_time IS NULL")
        naive = events.where("offset >= 0")
        optimizer = spark._jsparkSession.sessionState().optimizer()  # a stream is planned only when it runs
        return tuple(str(optimizer.execute(df._jdf.queryExecution().analyzed())) for df in (documented, naive))

    documented, naive = await in_spark(spark, plans)
    assert documented.index("Filter") < documented.index("EventTimeWatermark")  # applied after it
    assert naive.index("EventTimeWatermark") < naive.index("Filter")  # pushed below it
