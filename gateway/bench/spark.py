"""`gateway bench --spark`: records per second through the Spark source, the exactly-once sink and a
streaming pipeline of both, beside raw Redis reading and writing the same bytes as 500-record blobs.

Spark runs in this process (local mode, two cores by default, Java 17); its start and a warm-up
query are left out of every figure. Needs the spark extra.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.bench.common import (
    CpuSpan,
    Row,
    create_topic,
    gateway_servers,
    raw_xadd_blobs,
    raw_xrange_blobs,
    redis_servers,
    running_gateway,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

WARMUP = 1000


def _java17() -> None:
    """Spark 4 wants Java 17: use Debian's when JAVA_HOME names nothing."""
    if not os.environ.get("JAVA_HOME"):
        homes = sorted(Path("/usr/lib/jvm").glob("java-17-openjdk-*"))
        if homes:
            os.environ["JAVA_HOME"] = str(homes[0])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


async def _fill(url: str, topic: str, partitions: int, count: int, size: int) -> None:
    from gateway.client import Client

    async with await Client.connect(url) as client:
        producer = await client.create_producer(topic, batch_max_messages=5000)
        payload = os.urandom(size)
        for start in range(0, count, 20_000):
            await asyncio.gather(*(producer.send(payload, partition=i % partitions)
                                   for i in range(start, min(count, start + 20_000))))
        await producer.close()


def _timed(work: Callable[[], object], span: CpuSpan) -> float:
    """Seconds `work` takes, `span` over them."""
    span.start()
    start = time.perf_counter()
    work()
    elapsed = time.perf_counter() - start
    span.stop()
    return elapsed


def measure_spark(redis_url: str, *, count: int, size: int, partitions: int, cores: int, seconds: float) -> list[Row]:
    """Every row of `gateway bench --spark`, with the servers' CPU per record (the gateway's and
    Redis's; Spark's JVM and Python workers are the client)."""
    _java17()
    from pyspark.sql import SparkSession

    from gateway.spark import register

    rows: list[Row] = []
    redis = redis_servers(redis_url)
    read_span, write_span = CpuSpan(redis), CpuSpan(redis)
    read_base = raw_xrange_blobs(redis_url, size, seconds, span=read_span)
    write_base = raw_xadd_blobs(redis_url, size, seconds, partitions=partitions, span=write_span)
    rows.append(Row("raw redis: XRANGE of 500-record blobs", size, read_base, cpu_us=read_span.per_record(read_base)))
    rows.append(Row("raw redis: XADD per 500-record blob", size, write_base, cpu_us=write_span.per_record(write_base)))
    with running_gateway(redis_url) as ports, tempfile.TemporaryDirectory(prefix="gateway-bench-spark-") as tmp:
        servers = gateway_servers([ports], redis_url)
        url = f"gateway://127.0.0.1:{ports['native']}"
        source = f"bench-in-{uuid.uuid4().hex[:6]}"
        create_topic(ports["admin"], source, partitions)
        asyncio.run(_fill(url, source, partitions, count, size))
        spark = (
            SparkSession.builder.master(f"local[{cores}]").appName("gateway bench")
            .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(cores))
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        try:
            def read(topic: str, ending: str = "latest") -> DataFrame:
                return (spark.read.format("gateway").option("url", url).option("topic", topic)
                        .option("endingOffsets", ending).load())

            def write(df: DataFrame, topic: str) -> None:
                df.write.format("gateway").option("url", url).option("topic", topic).mode("append").save()

            # warm-up: Python workers started, the data source known to every process
            warm = json.dumps({source: {str(p): WARMUP // partitions for p in range(partitions)}})
            write(read(source, warm).select("value"), f"bench-warm-{uuid.uuid4().hex[:6]}")

            span = CpuSpan(servers)
            t = _timed(lambda: read(source).write.format("noop").mode("overwrite").save(), span)
            rows.append(Row(f"spark source (local[{cores}])", size, count / t, "XRANGE/blob", read_base,
                            cpu_us=span.per(count)))
            generated = spark.range(count).selectExpr(f"unhex(repeat('ab', {size})) as value").cache()
            generated.count()
            span = CpuSpan(servers)
            t = _timed(lambda: write(generated, f"bench-sink-{uuid.uuid4().hex[:6]}"), span)
            rows.append(Row(f"spark sink, exactly once (local[{cores}])", size, count / t, "XADD/blob", write_base,
                            cpu_us=span.per(count)))
            query = (
                spark.readStream.format("gateway").option("url", url).option("topic", source)
                .option("startingOffsets", "earliest").load()
                .select("key", "value")
                .writeStream.format("gateway").option("url", url).option("topic", f"bench-out-{uuid.uuid4().hex[:6]}")
                .option("checkpointLocation", str(Path(tmp) / "checkpoint"))
                .trigger(availableNow=True)
            )
            span = CpuSpan(servers)
            t = _timed(lambda: query.start().awaitTermination(), span)
            rows.append(Row(f"spark stream: source -> sink (local[{cores}])", size, count / t, "XRANGE/blob", read_base,
                            cpu_us=span.per(count)))
        finally:
            spark.stop()
    return rows
