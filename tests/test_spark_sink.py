"""The exactly-once sink: a micro-batch becomes visible all at once, a replayed batch id is a no-op, a
failed task attempt leaves nothing, a zombie driver is fenced. Driver commits are first called
directly with the messages tasks would send; then real queries run in the shared local Spark."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from collections import Counter
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from gateway.client import Client
from gateway.errors import AuthenticationFailed
from gateway.server.gateway import Gateway
from gateway.spark import blocking
from gateway.spark.options import OptionError, SinkOptions, SourceOptions
from gateway.spark.sink import GatewayStreamWriter, TaskCommit, check_schema, transaction_key
from gateway.spark.source import GatewayStreamReader
from tests.conftest import in_spark, native_url, run_example, spark_env, test_config

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]  # a JVM is slow to start on a busy machine


async def committed(client: Client, topic: str) -> list:
    """Every committed message of the topic, READ_COMMITTED."""
    out = []
    for info in await client.list_partitions(topic):
        out += [m async for m in client.read_range(topic, info.partition, 0)]
    return out


async def settled(client: Client, topic: str) -> bool:
    """No transaction is open on the topic: nothing holds its readers back."""
    return all(i.last_stable_offset == i.high_watermark for i in await client.list_partitions(topic))


async def task(client: Client, query: str, batch: int, values: list[bytes]) -> str:
    """A task's transaction, as the stream writer opens it."""
    producer = await client.create_producer("sunk")
    txn = await client.new_transaction(timeout=30, group_key=transaction_key(query), group_commit_id=batch)
    for v in values:
        await producer.send(v, txn=txn)
    await txn.flush()
    return txn.txn_id


async def test_the_sink_checks_its_columns_up_front(gateway):
    from pyspark.sql.types import IntegerType, StringType, StructType

    opts = SinkOptions.parse({"url": native_url(gateway), "topic": "t"})
    check_schema(StructType().add("value", StringType()).add("partition", IntegerType()), opts)
    with pytest.raises(OptionError, match="needs a value column"):
        check_schema(StructType().add("key", StringType()), opts)
    with pytest.raises(OptionError, match="drop or rename column 'extra'"):
        check_schema(StructType().add("value", StringType()).add("extra", StringType()), opts)
    with pytest.raises(OptionError, match="'partition' is string"):
        check_schema(StructType().add("value", StringType()).add("partition", StringType()), opts)
    with pytest.raises(OptionError, match="topic"):
        check_schema(StructType().add("value", StringType()), SinkOptions.parse({"url": native_url(gateway)}))


async def test_a_replayed_batch_is_a_no_op_and_a_zombie_driver_is_fenced(gateway, client):
    writer = GatewayStreamWriter(SinkOptions.parse({"url": native_url(gateway), "topic": "sunk"}))

    async def commit(run: str, batch: int, *txns: str) -> None:
        msgs = [TaskCommit(t, 1, "q1", run, batch) for t in txns]
        await asyncio.to_thread(writer.commit, msgs, batch)

    await commit("run-1", 0, await task(client, "q1", 0, [b"a"]), await task(client, "q1", 0, [b"b"]))
    assert sorted(m.value for m in await committed(client, "sunk")) == [b"a", b"b"]
    # the driver died after our commit, before Spark's commit log: a new run replays batch 0
    replay = [await task(client, "q1", 0, [b"a"]), await task(client, "q1", 0, [b"b"])]
    await commit("run-2", 0, *replay)
    assert sorted(m.value for m in await committed(client, "sunk")) == [b"a", b"b"]
    assert {(await gateway.services.txn.describe(t)).state for t in replay} == {"ABORTED"}
    # the first run's driver is not dead after all: its next batch is refused and dropped
    zombie = await task(client, "q1", 1, [b"zombie"])
    with pytest.raises(RuntimeError, match="newer run"):
        await commit("run-1", 1, zombie)
    assert (await gateway.services.txn.describe(zombie)).state == "ABORTED"
    await commit("run-2", 1, await task(client, "q1", 1, [b"c"]))
    assert sorted(m.value for m in await committed(client, "sunk")) == [b"a", b"b", b"c"]
    assert await settled(client, "sunk")
    key = await gateway.services.fence.get("", transaction_key("q1"))
    assert (key.incarnation, key.last_commit_id) == ("run-2", 1)


async def test_a_task_attempt_that_fails_after_sending_leaves_nothing(gateway, client):
    """The task's rows went out before it failed: they were stored, and are aborted with it."""
    from gateway.spark.sink import write_batches

    opts = SinkOptions.parse({"url": native_url(gateway), "topic": "half"})
    await gateway.services.log.create_topic("half", 1)

    def rows():
        yield pa.record_batch({"value": [b"sent-before-the-failure"] * 3})
        with blocking.Session(opts.gateway) as probe:  # wait until the gateway holds them, in the open txn
            deadline = time.monotonic() + 10
            while probe.run(probe.client.list_partitions("half"))[0].high_watermark < 3:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        raise RuntimeError("the executor fell over")

    def attempt() -> None:
        with blocking.Session(opts.gateway) as session:
            write_batches(session, opts, rows())

    with pytest.raises(RuntimeError, match="fell over"):
        await asyncio.to_thread(attempt)
    assert await committed(client, "half") == []
    assert await settled(client, "half")  # aborted at once, not left to time out


# -- real queries ----------------------------------------------------------------------------------


def source(spark, gw, topic: str, **options: str):
    df = spark.readStream.format("gateway").option("url", native_url(gw)).option("topic", topic)
    for k, v in options.items():
        df = df.option(k, v)
    return df.load()


async def test_pipeline_end_to_end_exactly_once(spark, gateway, client, tmp_path):
    await gateway.services.log.create_topic("in", 2)
    await gateway.services.log.create_topic("out", 3)
    producer = await client.create_producer("in")
    await asyncio.gather(*(
        producer.send(f"v{i}".encode(), key=f"k{i}".encode(), headers={"n": str(i).encode()},
                      event_time=1_700_000_000_000 + i)
        for i in range(200)
    ))

    def run() -> str:
        query = (
            source(spark, gateway, "in", startingOffsets="earliest", maxRecordsPerTrigger="60")
            .selectExpr("key", "value", "headers", "event_time")
            .writeStream.format("gateway").option("url", native_url(gateway)).option("topic", "out")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180), "the query did not finish"
        assert query.exception() is None
        return str(query.id)

    query_id = await in_spark(spark, run)
    out = await committed(client, "out")
    assert Counter(m.value for m in out) == Counter(f"v{i}".encode() for i in range(200))
    m = next(m for m in out if m.value == b"v7")
    assert (m.key, m.headers, m.event_time) == (b"k7", {"n": b"7"}, 1_700_000_000_007)
    assert await settled(client, "out")
    key = await gateway.services.fence.get("", transaction_key(query_id))
    assert key.last_commit_id == 3  # four micro-batches of at most 60 offsets


async def test_a_failed_task_attempt_leaves_nothing_beside_the_retry(spark, gateway, client, tmp_path):
    """The first attempt fails once the sink has stored a part of its rows; the retry writes them all."""
    from pyspark.sql.functions import udf

    await gateway.services.log.create_topic("retry-in", 1)
    await gateway.services.log.create_topic("retry-out", 1)
    producer = await client.create_producer("retry-in")
    pad = b"." * 2000  # rows large enough to pass the buffers between Spark's Python workers at once
    await asyncio.gather(*(producer.send(f"r{i}".encode() + pad) for i in range(300)))
    url = native_url(gateway)

    @udf("binary", useArrow=False)
    def first_attempt_fails(value):
        from pyspark import TaskContext

        from gateway.spark import blocking
        from gateway.spark.options import Endpoint

        if value.startswith(b"r299.") and TaskContext.get().attemptNumber() == 0:
            with blocking.Session(Endpoint(url)) as probe:
                deadline = time.monotonic() + 30
                while probe.run(probe.client.list_partitions("retry-out"))[0].high_watermark < 100:
                    assert time.monotonic() < deadline, "the sink never stored the first rows"
                    time.sleep(0.05)
            raise RuntimeError("this attempt fails after some of its rows were written")
        return value

    def run() -> None:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")  # rows reach the sink early
        try:
            query = (
                source(spark, gateway, "retry-in", startingOffsets="earliest")
                .select(first_attempt_fails("value").alias("value"))
                .writeStream.format("gateway").option("url", url).option("topic", "retry-out")
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(availableNow=True)
                .start()
            )
            assert query.awaitTermination(180), "the query did not finish"
            assert query.exception() is None
        finally:
            spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")

    await in_spark(spark, run)
    out = await committed(client, "retry-out")
    assert Counter(m.value for m in out) == Counter(f"r{i}".encode() + pad for i in range(300))
    sl = await gateway.services.log.read("retry-out", 0, 0, 1000, read_committed=True)
    assert len(sl.aborted) == 1  # the first attempt's transaction: stored, then aborted
    assert await settled(client, "retry-out")


async def test_batch_write_is_all_or_nothing(spark, gateway, client):
    def write() -> None:
        df = spark.createDataFrame(
            [(f"k{i}", f"w{i}", datetime(2024, 1, 1, tzinfo=UTC)) for i in range(20)],
            "key string, value string, event_time timestamp",
        )
        df.write.format("gateway").option("url", native_url(gateway)).option("topic", "written").mode(
            "append").save()

    await in_spark(spark, write)
    out = await committed(client, "written")
    assert sorted(m.value for m in out) == sorted(f"w{i}".encode() for i in range(20))
    assert {m.event_time for m in out} == {1_704_067_200_000}


# -- crashes: the driver in a process of its own ---------------------------------------------------


async def start_driver(gw, checkpoint, **env: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.spark_driver", native_url(gw), "crash-in", "crash-out", str(checkpoint), "100",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
        env={**os.environ, **spark_env(), **env},
    )


async def finish(proc: asyncio.subprocess.Process, timeout: float = 400) -> tuple[int, str]:
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    return proc.returncode or 0, out.decode(errors="replace")


async def crash_input(gateway, client) -> list[bytes]:
    await gateway.services.log.create_topic("crash-in", 2)
    await gateway.services.log.create_topic("crash-out", 2)
    producer = await client.create_producer("crash-in")
    values = [f"c{i}".encode() for i in range(300)]
    await asyncio.gather(*(producer.send(v, key=v) for v in values))
    return values


@pytest.mark.timeout(900)  # three drivers, each starting a JVM of its own
async def test_killed_mid_way_then_right_after_a_sink_commit_every_input_once(gateway, client, tmp_path):
    values = await crash_input(gateway, client)
    checkpoint = tmp_path / "checkpoint"

    # 1. the driver and its JVM are killed in the middle of the query
    proc = await start_driver(gateway, checkpoint)
    deadline = asyncio.get_running_loop().time() + 300
    while sum(i.high_watermark for i in await client.list_partitions("crash-out")) == 0:
        assert proc.returncode is None and asyncio.get_running_loop().time() < deadline, "no output in time"
        await asyncio.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    await finish(proc)

    # 2. restarted, it loses its JVM right after the gateway commits its first batch, before Spark
    # records that batch as done
    batches = sorted(int(f.name) for f in (checkpoint / "offsets").iterdir() if f.name.isdigit())
    first = batches[-1] if not (checkpoint / "commits" / str(batches[-1])).exists() else batches[-1] + 1
    code, out = await finish(await start_driver(gateway, checkpoint, GATEWAY_SPARK_KILL_AFTER_COMMIT=str(first)))
    assert code != 0, f"the driver was to lose its JVM after committing batch {first}:\n{out[-3000:]}"
    assert (checkpoint / "offsets" / str(first)).exists() and not (checkpoint / "commits" / str(first)).exists()
    key = await gateway.services.fence.get("", transaction_key(out.split("query ")[1].split()[0]))
    assert key.last_commit_id == first

    # 3. restarted again, it replays that batch (a no-op on the gateway) and finishes
    code, out = await finish(await start_driver(gateway, checkpoint))
    assert code == 0, out[-3000:]
    assert Counter(m.value for m in await committed(client, "crash-out")) == Counter(values)
    replays = [await gateway.services.log.read("crash-out", p, 0, 1000, read_committed=True) for p in (0, 1)]
    assert any(sl.aborted for sl in replays)  # the replay was written, then dropped (and step 1's leftovers)
    assert await settled(client, "crash-out")  # nothing the killed tasks left holds readers back


@pytest.mark.timeout(600)
async def test_the_pipeline_example(gateway, client, monkeypatch):
    for name, value in spark_env().items():
        monkeypatch.setenv(name, value)
    code, text = await run_example("spark_pipeline.py", gateway, timeout=500)
    assert code == 0, text[-5000:]
    windows = [line.strip() for line in text.splitlines() if line.startswith("  window")]
    assert windows == [f"window [{w * 10}s, {w * 10 + 10}s): 10 readings, total {1520 + 100 * w}" for w in range(4)]
    assert "every window written once, with every reading" in text
    batches = [int(b) for b in re.findall(r"^batch +(\d+): +\d+ rows read .* watermark ", text, re.M)]
    assert batches == list(range(len(batches))) and len(batches) > 1, text  # a line per micro-batch
    assert re.search(r"^batch .* watermark 2023-11-14", text, re.M)  # the broker watermark moved Spark's
    sink = re.search(r"^query \S+: \S+ -> windows of 10s -> (\S+)$", text, re.M)
    assert sink, text
    assert len(await committed(client, sink.group(1))) == 4


async def test_source_and_sink_log_in_where_authentication_is_on(redis_url):
    gw = Gateway(test_config(redis_url, auth=True, super_users="etl"))
    await gw.start()
    try:
        await gw.services.security.set_user("etl", "etl-secret")
        login = {"url": native_url(gw), "username": "etl", "password": "etl-secret"}
        async with await Client.connect(native_url(gw), username="etl", password="etl-secret") as etl:
            await (await etl.create_producer("secured")).send(b"in")
            txn = await etl.new_transaction(timeout=30, group_key=transaction_key("q"), group_commit_id=0)
            await (await etl.create_producer("secured-out")).send(b"out", txn=txn)
            await txn.flush()
        reader = GatewayStreamReader(SourceOptions.parse({**login, "topic": "secured"}, streaming=True))
        assert await asyncio.to_thread(reader.latestOffset, {}, reader.getDefaultReadLimit()) == {"secured": {"0": 1}}
        writer = GatewayStreamWriter(SinkOptions.parse({**login, "topic": "secured-out"}))
        await asyncio.to_thread(writer.commit, [TaskCommit(txn.txn_id, 1, "q", "run-1", 0)], 0)
        assert (await gw.services.fence.get("etl", transaction_key("q"))).last_commit_id == 0  # etl's own key
        anonymous = GatewayStreamReader(SourceOptions.parse({"url": native_url(gw), "topic": "secured"}, streaming=True))
        with pytest.raises(AuthenticationFailed):
            await asyncio.to_thread(anonymous.initialOffset)
    finally:
        await gw.stop()
