"""Range reads: a reader that keeps its own positions (Spark keeps them in its checkpoint) reads
offsets [start, end) of a partition, READ_COMMITTED, and the gateway remembers nothing of it.

The gateway sends whole stored batches, without transaction markers or aborted batches; records are
decoded here, on the reader's side, and those outside the range dropped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.client.message import Message, decode_batch
from gateway.errors import OffsetOutOfRange
from gateway.pb import gateway_pb2 as pb

if TYPE_CHECKING:
    from gateway.client.client import Client

DEFAULT_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    log_start: int  # the first offset still stored
    high_watermark: int  # the next offset to be written
    last_stable_offset: int  # where READ_COMMITTED readers stop: the oldest open transaction's first offset


@dataclass(frozen=True)
class StoredBatch:
    """One record batch as stored (RecordBatch v2); its records may begin before the range asked for
    and end after it."""

    partition: int
    base_offset: int
    batch: bytes


async def list_partitions(client: Client, topic: str) -> list[PartitionInfo]:
    resp = await client.request(pb.Request(list_partitions=pb.ListPartitions(topic=topic)))
    return [
        PartitionInfo(p.partition, p.log_start, p.high_watermark, p.last_stable_offset)
        for p in resp.partitions.partitions
    ]


async def read_batches(
    client: Client, topic: str, partition: int, start: int, end: int = -1, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> AsyncIterator[StoredBatch]:
    """The stored batches holding the committed records of [start, end); end -1 reads up to the
    last stable offset as it is when the read gets there. OffsetOutOfRange when `start` is gone
    (retention) or the range runs past the last stable offset."""
    offset = start
    while end < 0 or offset < end:
        req = pb.ReadRange(topic=topic, partition=partition, start=offset, end=end, max_bytes=max_bytes)
        got = (await client.request(pb.Request(read_range=req))).range_read
        for e in got.entries:
            yield StoredBatch(partition, e.base_offset, e.batch)
        if got.next_offset <= offset:
            if end >= 0 and offset < end:
                raise OffsetOutOfRange(
                    f"{topic}-{partition}: [{offset}, {end}) runs past the last stable offset {got.last_stable_offset}"
                )
            return
        offset = got.next_offset


async def read_range(
    client: Client, topic: str, partition: int, start: int, end: int = -1, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> AsyncIterator[Message]:
    """The committed messages of offsets [start, end), in offset order."""
    async for b in read_batches(client, topic, partition, start, end, max_bytes=max_bytes):
        for m in decode_batch(topic, partition, b.base_offset, b.batch):
            if m.offset >= start and (end < 0 or m.offset < end):
                yield m
