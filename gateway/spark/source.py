"""The source: batch reads (`spark.read.format("gateway")`) and micro-batches
(`spark.readStream.format("gateway")`) of committed records, by offset range.

Offsets live in Spark's checkpoint and nowhere else: the gateway keeps no position for the query.
A micro-batch ends at each partition's last stable offset, below which every transaction has ended,
so a replayed micro-batch reads exactly the same records. The driver plans [start, end) per topic
partition; each task gets that range as a picklable `RangePartition`, opens its own connection in
`read`, and decodes the stored batches into Arrow columns itself (the gateway never decodes them).

With `emitWatermarks`, one more task per micro-batch (a `WatermarkPartition`) looks up the broker
watermark at the batch's end offsets, the minimum over the topics read, and emits it as a row of
its own: `offset` -1, no key or value, the watermark in `event_time`, so it advances a
`withWatermark("event_time", ...)` step. A replay finds the same watermark: it depends only on
what the log holds below those offsets.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from gateway.client import EVENT_TIME_HEADER, Client, OffsetOutOfRange, PartitionInfo, StoredBatch
from gateway.formats.records import iter_records
from gateway.spark import blocking
from gateway.spark.options import Endpoint, Offsets, OptionError, SourceOptions, resolve

SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("headers", ArrayType(StructType([
        StructField("key", StringType()),
        StructField("value", BinaryType()),
    ]))),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("event_time", TimestampType()),
])
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")
ROWS_PER_ARROW_BATCH = 8192


class DataLoss(RuntimeError):
    """Records the query was to read are gone (retention or DeleteRecords moved the log start)."""


@dataclass
class RangePartition(InputPartition):
    """One task's work, all it needs to do it: offsets [start, end) of one topic partition."""

    gateway: Endpoint
    topic: str
    partition: int
    start: int
    end: int
    fail_on_data_loss: bool
    max_bytes: int


@dataclass
class WatermarkPartition(InputPartition):
    """The micro-batch's watermark row: the broker watermark at its end offsets."""

    gateway: Endpoint
    end: Offsets


WATERMARK_OFFSET = -1  # the offset of a watermark row


def check_schema(schema: StructType) -> None:
    if schema != SCHEMA:
        raise OptionError(f"the gateway source has a fixed schema ({SCHEMA.simpleString()}); "
                          f"do not give it another ({schema.simpleString()})")


def fetch_bounds(gateway: Endpoint, topics: tuple[str, ...]) -> dict[str, list[PartitionInfo]]:
    async def work(client: Client) -> dict[str, list[PartitionInfo]]:
        return {t: await client.list_partitions(t) for t in topics}

    return blocking.call(gateway, work)


def plan(start: Offsets, end: Offsets, opts: SourceOptions) -> list[RangePartition]:
    """A task per topic partition with something between its start and end; a partition new since
    `start` is read from its beginning."""
    out = []
    for topic, parts in sorted(end.items()):
        for p, hi in sorted(parts.items(), key=lambda kv: int(kv[0])):
            lo = start.get(topic, {}).get(p, 0)
            if hi > lo:
                out.append(RangePartition(opts.gateway, topic, int(p), lo, hi, opts.fail_on_data_loss,
                                          opts.max_bytes_per_read))
    return out


# -- reading, in the task ------------------------------------------------------------------------


async def _log_start(client: Client, topic: str, partition: int) -> int:
    return next(i.log_start for i in await client.list_partitions(topic) if i.partition == partition)


async def _stored(client: Client, part: RangePartition, start: int) -> AsyncIterator[StoredBatch]:
    try:
        async for b in client.read_batches(part.topic, part.partition, start, part.end, max_bytes=part.max_bytes):
            yield b
    except OffsetOutOfRange as exc:
        if part.fail_on_data_loss:
            raise DataLoss(f"offsets [{part.start}, {part.end}) of {part.topic}-{part.partition} are no longer "
                           f"all stored ({exc}); failOnDataLoss=false reads what is left") from exc
        raise


class _Columns:
    """Rows of one topic partition gathered column by column, for one Arrow batch."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.clear()

    def clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[list[tuple[str, bytes | None]]] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.event_times: list[int | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add_batch(self, b: StoredBatch, start: int, end: int) -> None:
        for rec in iter_records(b.batch, b.base_offset):
            if not start <= rec.offset < end:
                continue
            event: int | None = None
            headers = rec.headers
            if any(k == EVENT_TIME_HEADER for k, _ in headers):
                raw = [v for k, v in headers if k == EVENT_TIME_HEADER][-1]
                headers = [(k, v) for k, v in headers if k != EVENT_TIME_HEADER]
                event = int(raw) * 1000 if raw else None
            self.keys.append(rec.key)
            self.values.append(rec.value)
            self.headers.append(headers)
            self.offsets.append(rec.offset)
            self.timestamps.append(rec.timestamp * 1000)
            self.event_times.append(event)

    def take(self) -> pa.RecordBatch:
        n = len(self.offsets)
        ts = ARROW_SCHEMA.field("timestamp").type
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array(self.headers, ARROW_SCHEMA.field("headers").type),
                pa.array([self.topic] * n, pa.string()),
                pa.array([self.partition] * n, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.timestamps, ts),
                pa.array(self.event_times, ts),
            ],
            schema=ARROW_SCHEMA,
        )
        self.clear()
        return batch


def read_range(part: RangePartition) -> Iterator[pa.RecordBatch]:
    """The committed records of the partition's range, as Arrow batches."""
    cols = _Columns(part.topic, part.partition)
    with blocking.Session(part.gateway) as session:
        start = part.start
        if not part.fail_on_data_loss:  # what retention removed is skipped
            start = max(start, session.run(_log_start(session.client, part.topic, part.partition)))
        for stored in session.iterate(_stored(session.client, part, start)):
            cols.add_batch(stored, start, part.end)
            if len(cols) >= ROWS_PER_ARROW_BATCH:
                yield cols.take()
    if len(cols):
        yield cols.take()


async def _broker_watermark(client: Client, end: Offsets) -> int | None:
    """The minimum over the topics of the watermark at `end`; topics without producers in their
    set hold nothing back."""
    found = [await client.watermark(topic, {int(p): o for p, o in parts.items()}) for topic, parts in end.items()]
    known = [w for w in found if w is not None]
    return min(known) if known else None


def watermark_row(part: WatermarkPartition) -> Iterator[pa.RecordBatch]:
    with blocking.Session(part.gateway) as session:
        watermark = session.run(_broker_watermark(session.client, part.end))
    if watermark is None:
        return
    topic = next(iter(part.end)) if len(part.end) == 1 else None
    ts = ARROW_SCHEMA.field("timestamp").type
    yield pa.RecordBatch.from_arrays(
        [
            pa.array([None], pa.binary()),
            pa.array([None], pa.binary()),
            pa.array([[]], ARROW_SCHEMA.field("headers").type),
            pa.array([topic], pa.string()),
            pa.array([None], pa.int32()),
            pa.array([WATERMARK_OFFSET], pa.int64()),
            pa.array([None], ts),
            pa.array([watermark * 1000], ts),
        ],
        schema=ARROW_SCHEMA,
    )


# -- the driver's side ---------------------------------------------------------------------------


class GatewayBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[RangePartition]:
        bounds = fetch_bounds(self.opts.gateway, self.opts.topics)
        start = resolve(self.opts.starting, bounds, "earliest")
        end = resolve(self.opts.ending, bounds, "latest")
        for topic, infos in bounds.items():
            for info in infos:
                hi = end[topic][str(info.partition)]
                if hi > info.last_stable_offset:
                    raise OptionError(f"endingOffsets {hi} for {topic}-{info.partition} is past its last stable "
                                      f"offset {info.last_stable_offset}")
        return plan(start, end, self.opts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return read_range(partition)


class GatewayStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches end at the last stable offsets, at most `maxRecordsPerTrigger` offsets apart;
    under Trigger.AvailableNow, at the offsets stable when the query started."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._target: Offsets | None = None  # Trigger.AvailableNow: read no further than this
        self._latest: Offsets | None = None

    def _available(self) -> Offsets:
        bounds = fetch_bounds(self.opts.gateway, self.opts.topics)
        stable = {t: {str(i.partition): i.last_stable_offset for i in infos} for t, infos in bounds.items()}
        if self._target is not None:
            target = self._target
            stable = {t: {p: min(o, target.get(t, {}).get(p, 0)) for p, o in parts.items()}
                      for t, parts in stable.items()}
        self._latest = stable
        return stable

    def initialOffset(self) -> dict[str, Any]:
        return resolve(self.opts.starting, fetch_bounds(self.opts.gateway, self.opts.topics), "latest")

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        end: Offsets = {t: dict(parts) for t, parts in start.items()}
        for topic, parts in self._available().items():
            for p, stable in parts.items():
                end.setdefault(topic, {})[p] = max(stable, start.get(topic, {}).get(p, 0))
        if isinstance(limit, ReadMaxRows):
            end = cap(start, end, limit.max_rows)
        return end

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = None
        self._target = self._available()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        parts: list[InputPartition] = list(plan(start, end, self.opts))
        if self.opts.emit_watermarks:
            parts.append(WatermarkPartition(self.opts.gateway, end))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, WatermarkPartition):
            return watermark_row(partition)
        assert isinstance(partition, RangePartition)
        return read_range(partition)


def cap(start: Mapping[str, Mapping[str, int]], end: Offsets, budget: int) -> Offsets:
    """Move `end` back so at most `budget` offsets lie between start and end: each partition gets
    its share of the budget by its backlog, the remainder going to the largest backlogs first."""
    backlog = {(t, p): hi - start.get(t, {}).get(p, 0) for t, parts in end.items() for p, hi in parts.items()}
    total = sum(backlog.values())
    if total <= budget:
        return end
    grant = {k: budget * b // total for k, b in backlog.items()}
    left = budget - sum(grant.values())
    for k in sorted(backlog, key=lambda k: (-backlog[k], k)):
        if left <= 0:
            break
        if grant[k] < backlog[k]:
            grant[k] += 1
            left -= 1
    return {t: {p: start.get(t, {}).get(p, 0) + grant[(t, p)] for p in parts} for t, parts in end.items()}
