"""`gateway bench`: native produce throughput and end-to-end latency, beside pipelined XADD of the
same bytes spread over as many streams as the topic has partitions."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

from gateway.bench.common import (
    CpuSpan,
    Row,
    gateway_servers,
    percentile,
    raw_xadd_per_record,
    redis_servers,
    run_client,
    running_gateways,
)


async def native_produce(port: int, size: int, seconds: float, span: CpuSpan | None = None) -> float:
    """Produce throughput: many sends in flight, the producer batching them; `span` over the timed part."""
    from gateway.client import Client

    topic = f"bench-{uuid.uuid4().hex[:8]}"
    async with await Client.connect(f"gateway://127.0.0.1:{port}") as client:
        producer = await client.create_producer(topic)
        payload = os.urandom(size)
        sent = 0
        span = span or CpuSpan()
        span.start()
        start = time.perf_counter()
        window: list[asyncio.Future[object]] = []
        while time.perf_counter() - start < seconds:
            window.append(asyncio.ensure_future(producer.send(payload)))
            if len(window) >= 2000:
                await asyncio.gather(*window)
                sent += len(window)
                window.clear()
        await asyncio.gather(*window)
        sent += len(window)
        rate = sent / (time.perf_counter() - start)
        span.stop()
        await producer.close()
    return rate


async def native_latency(port: int, size: int, seconds: float, rate: float = 2000.0) -> tuple[float, float]:
    """End-to-end latency (send to receive) at a steady rate well below saturation: p50, p99 in ms."""
    from gateway.client import Client

    topic = f"bench-lat-{uuid.uuid4().hex[:8]}"
    latencies: list[float] = []
    async with await Client.connect(f"gateway://127.0.0.1:{port}") as client:
        producer = await client.create_producer(topic)
        consumer = await client.subscribe(topic, "bench", initial_position="earliest")
        payload = os.urandom(max(size - 8, 0))
        total = int(seconds * rate)

        async def consume() -> None:
            acks = []
            while len(latencies) < total:
                msg = await consumer.receive(timeout=30)
                sent_ns = int.from_bytes((msg.value or b"")[:8], "big")
                latencies.append((time.perf_counter_ns() - sent_ns) / 1e6)
                # not awaited one by one: acks in flight together share a round trip
                acks.append(asyncio.ensure_future(consumer.acknowledge(msg)))
            await asyncio.gather(*acks)

        reader = asyncio.create_task(consume())
        start = time.perf_counter()
        pending = []
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            pending.append(asyncio.ensure_future(producer.send(time.perf_counter_ns().to_bytes(8, "big") + payload)))
        await asyncio.gather(*pending)
        await asyncio.wait_for(reader, 60)
        await producer.close()
        await consumer.close()
    return percentile(latencies, 0.5), percentile(latencies, 0.99)


def measure_native(url: str, sizes: list[int], seconds: float, partitions: int, gateways: int) -> list[Row]:
    """Every row of `gateway bench`: per size, the raw baseline, produce, and latency at 2,000/s;
    the first two with the servers' CPU per record."""
    rows: list[Row] = []
    with running_gateways(url, gateways) as running:
        port = running[0]["native"]
        redis, servers = redis_servers(url), gateway_servers(running, url)
        for size in sizes:
            raw, ours = CpuSpan(redis), CpuSpan(servers)
            base = raw_xadd_per_record(url, size, seconds, partitions=partitions, span=raw)
            rows.append(Row("raw redis: pipelined XADD/record", size, base, cpu_us=raw.per_record(base)))
            rate = run_client(native_produce(port, size, seconds, ours))
            rows.append(Row("native produce", size, rate, "XADD/record", base, cpu_us=ours.per_record(rate)))
            p50, p99 = run_client(native_latency(port, size, min(seconds, 5.0)))
            rows.append(Row("native e2e latency at 2,000/s", size, 2000.0, p50_ms=p50, p99_ms=p99))
    return rows
