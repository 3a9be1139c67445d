"""`gateway bench --share`: a share group (KIP-932) draining a topic through 1, 3 and 10
confluent-kafka ShareConsumers, each record acknowledged explicitly (ACCEPT), beside a classic
consumer group draining the same topic and the raw-Redis queue of the same bytes (XREADGROUP then
XACK of every entry, one entry per record, 500 per round trip).

Each figure is records per second from the first poll to the last record, over the same records,
with the CPU each server process spent per record over that interval.
The consumers are threads of this process: librdkafka fetches outside the GIL, the per-record
acknowledge calls do not.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
import uuid
from typing import Any

from gateway.bench.common import (
    CpuSpan,
    Progress,
    Row,
    create_kafka_topic,
    gateway_servers,
    raw_queue,
    redis_servers,
    running_gateways,
)

CONSUMERS = (1, 3, 10)
_DEADLINE = 300.0  # seconds a run may take at most


def _produce(bootstrap: str, topic: str, size: int, count: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    value = os.urandom(size)
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120):
        raise RuntimeError("records left unsent")


def _earliest(bootstrap: str, group: str) -> None:
    """The share group starts at the log start (Kafka's default is the end)."""
    admin: Any = importlib.import_module("confluent_kafka.admin")  # its config classes are not exported to mypy
    entry = admin.ConfigEntry("share.auto.offset.reset", "earliest",
                              incremental_operation=admin.AlterConfigOpType.SET)
    resource = admin.ConfigResource(admin.ResourceType.GROUP, group, incremental_configs=[entry])
    client = admin.AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the futures resolve
    for f in client.incremental_alter_configs([resource]).values():
        f.result(30)


def share_drain(bootstrap: str, topic: str, count: int, consumers: int, span: CpuSpan) -> float:
    """Records per second through `consumers` share consumers accepting each record."""
    from confluent_kafka import ShareConsumer

    group = f"bench-share-{uuid.uuid4().hex[:6]}"
    _earliest(bootstrap, group)
    seen: set[int] = set()
    lock = threading.Lock()
    started: list[float] = []

    def work() -> None:
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        deadline = time.monotonic() + _DEADLINE
        try:
            while len(seen) < count and time.monotonic() < deadline:
                batch = [m for m in c.poll(0.2) if m.error() is None]
                for m in batch:
                    c.acknowledge(m)  # sent with the next poll's fetch
                if batch:
                    with lock:
                        if not started:
                            span.start()
                            started.append(time.perf_counter())
                        seen.update(m.offset() or 0 for m in batch)
        finally:
            c.close()

    threads = [threading.Thread(target=work) for _ in range(consumers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started[0]
    span.stop()
    if len(seen) < count:
        raise RuntimeError(f"share consumers got {len(seen)} of {count} records")
    return count / elapsed


def classic_drain(bootstrap: str, topic: str, count: int, span: CpuSpan) -> float:
    """Records per second through one classic-group consumer committing after each batch."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-classic-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got, start = 0, 0.0
    deadline = time.monotonic() + _DEADLINE
    try:
        while got < count and time.monotonic() < deadline:
            msgs = [m for m in c.consume(10000, 0.5) if m.error() is None]
            if msgs and not start:
                span.start()
                start = time.perf_counter()
            if msgs:
                got += len(msgs)
                c.commit(asynchronous=True)
        elapsed = time.perf_counter() - start
        span.stop()
    finally:
        c.close()
    return got / elapsed


def measure_share(url: str, size: int, count: int) -> list[Row]:
    """Every row of `gateway bench --share`: `count` records of `size` bytes, drained each way."""
    span = CpuSpan(redis_servers(url))
    base = raw_queue(url, size, count, span)
    rows = [Row("raw redis: XREADGROUP + XACK", size, base, cpu_us=span.per(count))]
    with running_gateways(url, 1) as (gateway,):
        servers = gateway_servers([gateway], url)
        bootstrap = f"127.0.0.1:{gateway['kafka']}"
        topic = f"bench-share-{uuid.uuid4().hex[:8]}"
        create_kafka_topic(bootstrap, topic, 1)
        Progress.doing_else(f"producing {count} records")
        _produce(bootstrap, topic, size, count)
        Progress.doing_else("")
        span = CpuSpan(servers)
        rows.append(Row("classic group, 1 consumer", size, classic_drain(bootstrap, topic, count, span),
                        "XREADGROUP", base, cpu_us=span.per(count)))
        for n in CONSUMERS:
            span = CpuSpan(servers)
            rows.append(Row(f"share group, {n} consumer{'s' if n > 1 else ''}, ACCEPT each", size,
                            share_drain(bootstrap, topic, count, n, span), "XREADGROUP", base,
                            cpu_us=span.per(count)))
    return rows
