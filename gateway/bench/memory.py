"""`gateway bench --memory`: Redis bytes per stored record, beside the payload (key + value) bytes.

Redis's memory is the log's disk, so this is the gateway's disk footprint: records produced with
confluent-kafka (acks=1) in batches (linger.ms 5) and one per batch (linger.ms 0,
batch.num.messages 1), and with the native client, at each size; then each partition's bytes as the
admin API reports them (Redis's MEMORY USAGE of the partition's keys, the figure DescribeLogDirs and
`gateway admin topics describe` show) over the records stored. Kafka's own log on disk is about
1.1x the payload for batches of small records and 1.65x for single-record batches of 100 B (the
61-byte batch header and the record's framing).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass

from gateway.bench.common import Progress, admin_json, create_kafka_topic, produce_count, running_gateway

SIZES = (100, 1024, 10240)
PAYLOAD_BYTES = 4_000_000  # of each measurement: enough batches that a stream's node overhead averages out
SINGLE_RECORDS = 5_000  # one per batch is slow to produce: fewer, still thousands of entries


@dataclass(frozen=True)
class MemoryRow:
    what: str
    size: int
    records: int
    bytes_per_record: float

    @property
    def ratio(self) -> float:
        return self.bytes_per_record / self.size


def format_rows(rows: list[MemoryRow]) -> str:
    head = f"{'measurement':<28} {'size':>6} {'records':>8} {'Redis B/record':>15} {'vs payload':>10}"
    return "\n".join([head, *(f"{r.what:<28} {r.size:>6} {r.records:>8} {r.bytes_per_record:>15,.1f} "
                              f"{r.ratio:>9.2f}x" for r in rows)])


def _partition_bytes(admin_port: int, topic: str) -> int:
    return int(admin_json(admin_port, f"/admin/v2/topics/{topic}")["partitions"][0]["bytes"])


def _kafka(bootstrap: str, topic: str, size: int, count: int, single: bool) -> None:
    produce_count(bootstrap, topic, size, count, {"linger.ms": 0, "batch.num.messages": 1} if single else {})


async def _native(port: int, topic: str, size: int, count: int) -> None:
    from gateway.client import Client

    value = os.urandom(size)
    async with await Client.connect(f"gateway://127.0.0.1:{port}") as client:
        producer = await client.create_producer(topic)
        for lo in range(0, count, 500):
            await asyncio.gather(*(producer.send(value, partition=0) for _ in range(min(500, count - lo))))


def measure_memory(url: str, sizes: list[int]) -> list[MemoryRow]:
    rows: list[MemoryRow] = []
    with running_gateway(url) as ports:
        bootstrap = f"127.0.0.1:{ports['kafka']}"
        for size in sizes:
            for what in ("kafka batched (linger 5 ms)", "kafka one record per batch", "native"):
                count = SINGLE_RECORDS if "one record" in what else max(1_000, PAYLOAD_BYTES // size)
                topic = f"bench-memory-{uuid.uuid4().hex[:6]}"
                Progress.doing_else(f"{what}, {size} B: {count} records")
                create_kafka_topic(bootstrap, topic, 1)
                if what == "native":
                    asyncio.run(_native(ports["native"], topic, size, count))
                else:
                    _kafka(bootstrap, topic, size, count, single="one record" in what)
                rows.append(MemoryRow(what, size, count, _partition_bytes(ports["admin"], topic) / count))
    Progress.doing_else("")
    return rows
