"""A Spark pipeline: event-time windows closed by the broker watermark, written exactly once.

Two sensors send readings with event times into a topic and say how far they have got
(`send_watermark`). A Spark query reads the topic with the gateway source, its broker watermark
included (`emitWatermarks`), sums the readings per 10-second event-time window, and writes each
window to another topic with the exactly-once sink as soon as the watermark has passed its end:
a window closes because the sensors said so, not because a later reading happened to arrive.
A line per micro-batch shows what Spark read, the watermark and the windows written.

    python examples/spark_pipeline.py --url gateway://127.0.0.1:6650

It needs the spark extra (`pip install -e .[spark]`) and Java 17 (JAVA_HOME).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
import uuid

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from gateway.client import Client
from gateway.spark import register

BASE = 1_700_000_000_000  # event times are seconds after this instant (epoch ms)
WINDOW_SECONDS = 10
WINDOWS = 4
READINGS_PER_WINDOW = 5  # per sensor


def expected() -> dict[int, tuple[int, int]]:
    """Window start (s after BASE) -> (readings, total), from the readings `feed` sends."""
    out = {}
    for w in range(WINDOWS):
        values = [sensor * 100 + w * 10 + i for sensor in (1, 2) for i in range(READINGS_PER_WINDOW)]
        out[w * WINDOW_SECONDS] = (len(values), sum(values))
    return out


async def feed(url: str, topic: str, pause: float, done: threading.Event) -> None:
    """Each sensor sends its readings of a window, then a watermark at the window's end; the sensors
    stay connected until `done` (closing a producer takes it out of the watermark set, and a set with
    nobody in it has no watermark to give)."""
    async with await Client.connect(url) as client:
        sensors = {n: await client.create_producer(topic, f"sensor-{n}-{uuid.uuid4().hex[:6]}") for n in (1, 2)}
        for w in range(WINDOWS):
            for n, producer in sensors.items():
                for i in range(READINGS_PER_WINDOW):
                    second = w * WINDOW_SECONDS + i * WINDOW_SECONDS // READINGS_PER_WINDOW
                    await producer.send(str(n * 100 + w * 10 + i), key=f"sensor-{n}", event_time=BASE + second * 1000)
                await producer.send_watermark(BASE + (w + 1) * WINDOW_SECONDS * 1000)
            await asyncio.sleep(pause)
        while not done.is_set():
            await asyncio.sleep(0.1)


async def written(url: str, topic: str) -> list[dict[str, int]]:
    """The windows the query has committed to `topic` so far."""
    async with await Client.connect(url) as client:
        try:
            infos = await client.list_partitions(topic)
        except Exception:  # the sink creates it with its first window
            return []
        out = []
        for info in infos:
            out += [json.loads(m.value) async for m in client.read_range(topic, info.partition, 0) if m.value]
        return sorted(out, key=lambda w: w["start"])


def pipeline(spark: SparkSession, url: str, source: str, sink: str, checkpoint: str) -> StreamingQuery:
    readings = (
        spark.readStream.format("gateway")
        .option("url", url).option("topic", source)
        .option("startingOffsets", "earliest")
        .option("emitWatermarks", "true")  # the broker watermark, as a row with offset -1
        .load()
    )
    windows = (
        readings.withWatermark("event_time", "0 seconds")
        # drop the watermark rows after they moved the watermark: the condition names event_time,
        # so Spark cannot move it below the watermark step
        .where("offset >= 0 OR event_time IS NULL")
        .groupBy(F.window("event_time", f"{WINDOW_SECONDS} seconds"))
        .agg(F.count("*").alias("readings"), F.sum(F.col("value").cast("string").cast("long")).alias("total"))
        .select(
            F.date_format("window.start", "HH:mm:ss").alias("key"),
            F.to_json(F.struct(
                ((F.unix_millis("window.start") - BASE) / 1000).cast("long").alias("start"),
                "readings", "total",
            )).alias("value"),
        )
    )
    return (
        windows.writeStream.format("gateway")
        .option("url", url).option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
        .trigger(processingTime="500 milliseconds")
        .start()
    )


class BatchLines:
    """A line for each micro-batch of a query. Each ended batch's progress is kept among the query's
    recent ones, so none is missed however long apart the looks are."""

    def __init__(self, query: StreamingQuery) -> None:
        self.query = query
        self.last = -1

    def show(self) -> bool:
        """A line for each batch that ended since the last look; True if there was any."""
        new = [p for p in self.query.recentProgress if p["batchId"] > self.last]
        for progress in new:
            self.last = progress["batchId"]
            watermark = progress.get("eventTime", {}).get("watermark", "-")
            print(f"batch {self.last:3d}: {progress['numInputRows']:4d} rows read "
                  f"({progress.get('processedRowsPerSecond', 0.0):7.1f}/s), watermark {watermark}", flush=True)
        return bool(new)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="gateway://127.0.0.1:6650")
    parser.add_argument("--source", default=f"readings-{uuid.uuid4().hex[:6]}")
    parser.add_argument("--sink", default=f"window-totals-{uuid.uuid4().hex[:6]}")
    parser.add_argument("--checkpoint", help="the query's checkpoint (default: a temporary one, removed at the end)")
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()

    spark = (
        SparkSession.builder.master("local[2]").appName("gateway pipeline")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    async def create_source() -> None:
        async with await Client.connect(args.url) as client:
            await (await client.create_producer(args.source)).close()

    asyncio.run(create_source())
    checkpoint_dir = tempfile.TemporaryDirectory(prefix="spark-pipeline-") if args.checkpoint is None else None
    checkpoint = args.checkpoint if checkpoint_dir is None else checkpoint_dir.name
    query = pipeline(spark, args.url, args.source, args.sink, checkpoint)
    print(f"query {query.id}: {args.source} -> windows of {WINDOW_SECONDS}s -> {args.sink}", flush=True)
    done = threading.Event()
    sensors = threading.Thread(target=asyncio.run, args=(feed(args.url, args.source, 1.0, done),), daemon=True)
    sensors.start()

    want = expected()
    batches = BatchLines(query)
    shown: set[int] = set()
    deadline = time.monotonic() + args.timeout
    try:
        while len(shown) < len(want):
            if query.exception() is not None:
                print(f"the query failed: {query.exception()}", file=sys.stderr)
                return 1
            if time.monotonic() > deadline:
                print("timed out waiting for the windows", file=sys.stderr)
                return 1
            if batches.show():  # a batch's windows are in the sink before its progress is
                for w in asyncio.run(written(args.url, args.sink)):
                    if w["start"] not in shown:
                        shown.add(w["start"])
                        print(f"  window [{w['start']}s, {w['start'] + WINDOW_SECONDS}s): "
                              f"{w['readings']} readings, total {w['total']}", flush=True)
            time.sleep(0.25)
    finally:
        done.set()
        query.stop()
        batches.show()  # those that ended since the last look
        spark.stop()
        sensors.join(10)
        if checkpoint_dir is not None:
            checkpoint_dir.cleanup()
    got = {w["start"]: (w["readings"], w["total"]) for w in asyncio.run(written(args.url, args.sink))}
    ok = got == want and len(asyncio.run(written(args.url, args.sink))) == len(want)
    print("every window written once, with every reading" if ok else f"unexpected windows: {got}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
