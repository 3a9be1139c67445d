"""`gateway bench --key-shared`: native Key_Shared subscriptions of 1, 3 and 10 consumers draining
one topic, beside shared subscriptions of as many consumers on the same topic and the raw-Redis
queue of the same bytes (XREADGROUP then XACK of every entry, one entry per record, 500 per round
trip).

The topic holds `--records` records of the first `--sizes`, over 100 keys, produced once; each
subscription starts at the earliest and is drained once, every message acknowledged (a batch's
acks in one request). Each figure is records per second from the first message to the last, with
the servers' CPU per record over the same interval. The consumers share one client process, as one
application's would.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import TYPE_CHECKING

from gateway.bench.common import (
    CpuSpan,
    Progress,
    Row,
    create_topic,
    gateway_servers,
    raw_queue,
    redis_servers,
    run_client,
    running_gateways,
)

if TYPE_CHECKING:
    from gateway.client import Consumer

CONSUMERS = (1, 3, 10)
KEYS = 100
RECORDS = 20_000  # the default of --records here: natively consumed messages are acknowledged one by one
_DEADLINE = 600.0  # seconds a drain may take at most


async def _produce(port: int, topic: str, size: int, count: int) -> None:
    from gateway.client import Client

    value = os.urandom(size)
    async with await Client.connect(f"gateway://127.0.0.1:{port}") as client, \
            await client.create_producer(topic) as producer:
        for i in range(0, count, 2000):
            await asyncio.gather(*(producer.send(value, key=b"key-%d" % (n % KEYS))
                                   for n in range(i, min(count, i + 2000))))


async def drain(port: int, topic: str, mode: str, consumers: int, count: int, span: CpuSpan | None = None) -> float:
    """Records per second through `consumers` consumers of a new `mode` subscription; `span` from
    the first message to the last."""
    from gateway.client import BatchReceivePolicy, Client

    policy = BatchReceivePolicy(max_num_messages=500, timeout=0.2)
    name = f"bench-{mode}-{uuid.uuid4().hex[:6]}"
    async with await Client.connect(f"gateway://127.0.0.1:{port}") as client:
        subs = await asyncio.gather(*(client.subscribe(topic, name, mode, "earliest", consumer_name=f"c{i}",
                                                       receiver_queue_size=1000, batch_receive_policy=policy)
                                      for i in range(consumers)))
        got, started = 0, 0.0
        span = span or CpuSpan()

        async def run(consumer: Consumer) -> None:
            nonlocal got, started
            while got < count:
                batch = await consumer.batch_receive()
                if batch:
                    if not started:
                        span.start()
                        started = time.perf_counter()
                    got += len(batch)
                    await asyncio.gather(*(consumer.acknowledge(m) for m in batch))

        await asyncio.wait_for(asyncio.gather(*(run(c) for c in subs)), _DEADLINE)
        rate = got / (time.perf_counter() - started)
        span.stop()
        return rate


def measure_key_shared(url: str, size: int, count: int, partitions: int) -> list[Row]:
    """Every row of `gateway bench --key-shared`."""
    span = CpuSpan(redis_servers(url))
    base = raw_queue(url, size, count, span)
    rows = [Row("raw redis: XREADGROUP + XACK", size, base, cpu_us=span.per(count))]
    with running_gateways(url, 1) as (gateway,):
        servers = gateway_servers([gateway], url)
        topic = f"bench-ks-{uuid.uuid4().hex[:8]}"
        create_topic(gateway["admin"], topic, partitions)
        Progress.doing_else(f"producing {count} records")
        run_client(_produce(gateway["native"], topic, size, count))
        Progress.doing_else("")
        for n in CONSUMERS:
            for mode in ("key_shared", "shared"):
                label = f"native {mode}, {n} consumer{'s' if n > 1 else ''}"
                span = CpuSpan(servers)
                rows.append(Row(label, size, run_client(drain(gateway["native"], topic, mode, n, count, span)),
                                "XREADGROUP", base, cpu_us=span.per(count)))
    return rows
