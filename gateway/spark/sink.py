"""The exactly-once sink: `df.writeStream.format("gateway")` (and `df.write`, all or nothing).

Each task attempt writes its rows inside a transaction of its own and leaves it open; its id goes
to the driver in the task's commit message. The driver's `commit(messages, batchId)` makes all of
them visible at one point of no return (a group commit on the gateway), which also records the
batch id as the query's last commit, fenced by the query's transaction key:

- a failed or retried attempt's transaction never reaches the driver: the attempt aborts it (or,
  if its process died, it times out), so only the successful attempt's writes become visible;
- a replayed batch id (the driver died after our commit and before Spark's own commit log) is a
  duplicate: the replay's transactions are aborted, nothing is written twice;
- the key is derived from the query id, and each run of the query is an incarnation of it: the
  first commit of a new run fences every earlier one, so a zombie driver's commit is refused.

A driver that dies between the point of no return and the markers is rolled forward by the gateway.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from gateway.client import Client, ExpiredTransactionError, GatewayError, NotAllowed, Producer, Transaction
from gateway.spark import blocking
from gateway.spark.options import Endpoint, OptionError, SinkOptions

log = logging.getLogger(__name__)

_HEADERS = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))
COLUMNS: dict[str, tuple[DataType, ...]] = {
    "value": (BinaryType(), StringType()),
    "key": (BinaryType(), StringType()),
    "headers": (_HEADERS,),
    "topic": (StringType(),),
    "partition": (IntegerType(),),
    "event_time": (TimestampType(), TimestampNTZType()),
}
MAX_IN_FLIGHT = 50_000  # records queued but maybe not yet stored, per task
# Fault injection for crash tests: the driver's JVM is killed with SIGKILL right after the commit
# of this batch id, before Spark records the batch as done.
_KILL_AFTER_COMMIT = os.environ.get("GATEWAY_SPARK_KILL_AFTER_COMMIT", "")


@dataclass
class TaskCommit(WriterCommitMessage):
    """What a task attempt hands to the driver: its open transaction and whose it is."""

    txn_id: str
    rows: int
    query_id: str
    run_id: str
    batch_id: int


def check_schema(schema: StructType, opts: SinkOptions) -> None:
    names = schema.fieldNames()
    if "value" not in names:
        raise OptionError("the gateway sink needs a value column (binary or string)")
    for f in schema.fields:
        allowed = COLUMNS.get(f.name)
        if allowed is None:
            raise OptionError(f"the gateway sink writes {', '.join(COLUMNS)}; drop or rename column {f.name!r}")
        if not any(_same_type(f.dataType, t) for t in allowed):
            kinds = " or ".join(t.simpleString() for t in allowed)
            raise OptionError(f"column {f.name!r} is {f.dataType.simpleString()}; the sink wants {kinds}")
    if opts.topic is None and "topic" not in names:
        raise OptionError('the gateway sink needs option "topic" or a topic column')


def _same_type(a: DataType, b: DataType) -> bool:
    """Types equal but for nullability, which the sink does not care about."""
    return a.simpleString() == b.simpleString()


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    i = batch.schema.get_field_index(name)
    if i < 0:
        return None
    col = batch.column(i)
    if pa.types.is_timestamp(col.type):
        millis = pc.divide(pc.cast(pc.cast(col, pa.timestamp("us")), pa.int64()), 1000)
        return cast("list[Any]", millis.to_pylist())
    return cast("list[Any]", col.to_pylist())


class _Rows:
    """One Arrow batch as the producer's arguments, converted in the caller's thread."""

    def __init__(self, batch: pa.RecordBatch, default_topic: str | None) -> None:
        self.values = _column(batch, "value") or []
        self.keys = _column(batch, "key")
        self.headers = _column(batch, "headers")
        self.topics = _column(batch, "topic")
        self.partitions = _column(batch, "partition")
        self.event_times = _column(batch, "event_time")
        self.default_topic = default_topic

    def __len__(self) -> int:
        return len(self.values)

    def topic(self, i: int) -> str:
        topic = (self.topics[i] if self.topics is not None else None) or self.default_topic
        if topic is None:
            raise OptionError("a row without a topic, and no topic option")
        return topic

    def header_list(self, i: int) -> list[tuple[str, bytes | None]] | None:
        if self.headers is None or not self.headers[i]:
            return None
        return [(h["key"], h["value"]) for h in self.headers[i]]


class _TxnWriter:
    """The rows of one task attempt, sent in its transaction from the session's loop."""

    def __init__(self, client: Client, txn: Transaction) -> None:
        self.client = client
        self.txn = txn
        self.producers: dict[str, Producer] = {}
        self.rows = 0
        self.unflushed = 0

    async def send(self, rows: _Rows) -> None:
        """Queue the rows; every MAX_IN_FLIGHT rows, wait until the gateway has what was queued."""
        for i, value in enumerate(rows.values):
            topic = rows.topic(i)
            producer = self.producers.get(topic)
            if producer is None:
                producer = self.producers[topic] = await self.client.create_producer(
                    topic, batch_max_messages=5000, batch_max_bytes=1 << 20)
            producer.queue(
                value,
                rows.keys[i] if rows.keys is not None else None,
                rows.header_list(i),
                rows.event_times[i] if rows.event_times is not None else None,
                partition=rows.partitions[i] if rows.partitions is not None else None,
                txn=self.txn,
            )
        self.rows += len(rows)
        self.unflushed += len(rows)
        if self.unflushed >= MAX_IN_FLIGHT:
            self.unflushed = 0
            await self.txn.flush()


def write_batches(
    session: blocking.Session, opts: SinkOptions, batches: Iterator[pa.RecordBatch], *, group_key: str = "",
    group_commit_id: int = 0,
) -> tuple[str, int]:
    """Send every row inside a new transaction, and wait until the gateway has them all; the
    transaction stays open for the driver (meant for the group commit of `group_key`). Aborted if
    anything fails. Spark's next rows are read and converted here while the session's loop sends."""
    txn = session.run(session.client.new_transaction(
        timeout=opts.transaction_timeout_ms / 1000, group_key=group_key, group_commit_id=group_commit_id))
    writer = _TxnWriter(session.client, txn)
    try:
        for batch in batches:
            session.run(writer.send(_Rows(batch, opts.topic)))
        session.run(txn.flush())
    except BaseException:
        with contextlib.suppress(GatewayError):
            session.run(txn.abort())
        raise
    return txn.txn_id, writer.rows


def _task_identity() -> tuple[str, str, int]:
    """(query id, run id, batch id) of the streaming task this runs in."""
    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("the gateway stream writer runs in Spark tasks")
    query_id = ctx.getLocalProperty("sql.streaming.queryId") or ""
    batch_id = ctx.getLocalProperty("streaming.sql.batchId") or ""
    m = re.search(r"runId = ([0-9a-f-]+)", ctx.getLocalProperty("spark.job.description") or "")
    run_id = m.group(1) if m else ctx.getLocalProperty("spark.jobGroup.id") or ""
    if not (query_id and run_id and batch_id):
        raise RuntimeError("no streaming query id, run id or batch id in the task's properties")
    return query_id, run_id, int(batch_id)


def transaction_key(query_id: str) -> str:
    return f"spark-query-{query_id}"


class GatewayStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskCommit:
        query_id, run_id, batch_id = _task_identity()
        with blocking.Session(self.opts.gateway) as session:
            txn_id, rows = write_batches(session, self.opts, iterator, group_key=transaction_key(query_id),
                                         group_commit_id=batch_id)
        return TaskCommit(txn_id, rows, query_id, run_id, batch_id)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        commits = [m for m in messages if isinstance(m, TaskCommit)]
        if not commits:
            return
        runs = {(m.query_id, m.run_id, m.batch_id) for m in commits}
        if len(runs) != 1 or commits[0].batch_id != batchId:
            raise RuntimeError(f"batch {batchId}: task commits of other batches or runs: {sorted(runs)}")
        query_id, run_id = commits[0].query_id, commits[0].run_id
        ids = [m.txn_id for m in commits]

        async def group_commit(client: Client) -> bool:
            return await client.commit_transactions(ids, commit_id=batchId)

        try:
            committed = blocking.call(self.opts.gateway, group_commit, transaction_key=transaction_key(query_id),
                                      incarnation=run_id)
        except (NotAllowed, ExpiredTransactionError) as exc:
            abort_all(self.opts.gateway, ids)
            raise RuntimeError(f"batch {batchId} of query {query_id} (run {run_id}) was not committed: {exc}. "
                               "A newer run of the query holds its transaction key, or a task's transaction "
                               "timed out (transactionTimeoutMs)") from exc
        log.info("batch %d of query %s: %s", batchId, query_id,
                 "committed" if committed else "committed before; this replay was dropped")
        if _KILL_AFTER_COMMIT == str(batchId):
            _kill_jvm()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        abort_all(self.opts.gateway, [m.txn_id for m in messages if isinstance(m, TaskCommit)])


class GatewayBatchWriter(DataSourceArrowWriter):
    """`df.write.format("gateway")`: every task's rows become visible together, or none."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskCommit:
        with blocking.Session(self.opts.gateway) as session:
            txn_id, rows = write_batches(session, self.opts, iterator)
        return TaskCommit(txn_id, rows, "", "", -1)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        ids = [m.txn_id for m in messages if isinstance(m, TaskCommit)]
        if ids:
            blocking.call(self.opts.gateway, lambda client: client.commit_transactions(ids))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_all(self.opts.gateway, [m.txn_id for m in messages if isinstance(m, TaskCommit)])


def abort_all(gateway: Endpoint, ids: list[str]) -> None:
    """Best effort: what is not aborted here times out."""
    if ids:
        with contextlib.suppress(GatewayError):
            blocking.call(gateway, lambda client: client.abort_transactions(ids))


def _kill_jvm() -> None:
    """SIGKILL the JVM this Python worker descends from."""
    pid = os.getppid()
    while pid > 1:
        if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
            log.warning("killing the driver's JVM (%d) after the commit, as asked", pid)
            os.kill(pid, signal.SIGKILL)
            return
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no JVM above this process")
