"""`gateway bench --watermarks`: what broker watermarks cost, beside the same Redis work done raw.

- send_watermark: a W_SET is a control batch appended to every partition's log and its mark added to
  every partition's index, against pipelined XADD + ZADD of the same bytes; one at a time (latency)
  and 16 producers at once (throughput), on 1 and 16 partitions.
- client.watermark: a lookup at the end of a partition reads its latest snapshot and the marks since,
  against ZREVRANGEBYSCORE + HGET + ZRANGEBYSCORE of an index of the same shape.
- native consume + acknowledge, with and without a W_SET after every 100 messages, against
  XREADGROUP + XACK of one entry per message.

Every row has the servers' CPU per watermark, lookup or message over its timed interval.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import TYPE_CHECKING, Any, cast

from gateway.bench.common import (
    CpuSpan,
    Row,
    Server,
    best_spanned,
    create_topic,
    gateway_servers,
    percentile,
    raw_client,
    redis_servers,
    run_client,
    running_gateway,
    streams,
    timed_steps,
)
from gateway.clock import now_ms
from gateway.domain.watermark import Mark
from gateway.formats.records import build_watermark_batch

if TYPE_CHECKING:
    from gateway.client import Producer

NOTE = "(records/s column: watermarks, lookups or messages per second, as each row says)"
IN_FLIGHT = 16  # producers sending watermarks at once (throughput), and raw watermarks per round trip
MARKS_SINCE = 72  # marks after the latest snapshot once 200 are written (one every 128 by default)
MESSAGES = 20_000  # per consume row
EVERY = 100  # messages between two watermarks in the consume row with markers
SIZE = 100  # message bytes in the consume rows


def _marker(producer: str = "producer-00") -> tuple[bytes, bytes]:
    """The bytes a W_SET puts in a log and in an index (as the gateway builds them)."""
    body = Mark(0, producer, now_ms(), now_ms()).encode()
    return build_watermark_batch(False, body), body


# -- raw Redis baselines -----------------------------------------------------------------------------


def raw_send(url: str, partitions: int, per_trip: int, seconds: float,
             span: CpuSpan | None = None) -> tuple[float, list[float]]:
    """Watermarks per second as XADD of the marker batch + ZADD of its mark to every partition,
    `per_trip` watermarks per round trip; and each round trip's milliseconds."""
    r = raw_client(url)
    logs = streams("wm", partitions)
    batch, body = _marker()
    sent = 0

    def step() -> int:
        nonlocal sent
        pipe = r.pipeline(transaction=False)
        for _ in range(per_trip):
            for log in logs:
                pipe.xadd(log, {"b": batch, "n": 1, "t": -1, "c": sent})
                pipe.zadd(f"{log}:marks", {b"%d - %s" % (sent, body): sent})
            sent += 1
        pipe.execute()
        return per_trip

    try:
        return timed_steps(seconds, step, span)
    finally:
        for log in logs:
            r.delete(log, f"{log}:marks")
        r.close()


def raw_lookup(url: str, seconds: float, span: CpuSpan | None = None) -> tuple[float, list[float]]:
    """Lookups per second of an index shaped as the gateway's after 200 marks of 8 producers: one
    snapshot (8 producers) and `MARKS_SINCE` marks after it, read in one round trip."""
    r = raw_client(url)
    (key,) = streams("wm-lookup", 1)
    snaps, data, marks = f"{key}:snaps", f"{key}:snapdata", f"{key}:marks"
    base = 200 - MARKS_SINCE
    pipe = r.pipeline(transaction=False)
    pipe.zadd(snaps, {str(base): base})
    pipe.hset(data, str(base), b"".join(_marker(f"producer-{i:02d}")[1] for i in range(8)))  # its size
    for o in range(base, 200):
        pipe.zadd(marks, {b"%d - %s" % (o, _marker(f"producer-{o % 8:02d}")[1]): o})
    pipe.execute()

    def step() -> int:
        pipe = r.pipeline(transaction=False)
        pipe.zrevrangebyscore(snaps, 200, "-inf", start=0, num=1)
        pipe.hget(data, str(base))
        pipe.zrangebyscore(marks, base, "(200")
        pipe.execute()
        return 1

    try:
        return timed_steps(seconds, step, span)
    finally:
        r.delete(snaps, data, marks)
        r.close()


def raw_consume(url: str, count: int, span: CpuSpan) -> float:
    """Messages per second read with XREADGROUP (500 at a time) and acknowledged with XACK."""
    r = raw_client(url)
    (key,) = streams("wm-consume", 1)
    value = os.urandom(SIZE)
    for lo in range(0, count, 1000):
        pipe = r.pipeline(transaction=False)
        for _ in range(min(1000, count - lo)):
            pipe.xadd(key, {"v": value})
        pipe.execute()
    r.xgroup_create(key, "bench", id="0")
    try:
        done = 0
        span.start()
        start = time.perf_counter()
        while done < count:
            ((_, entries),) = cast("list[tuple[Any, list[tuple[bytes, Any]]]]",
                                   r.xreadgroup("bench", "c", {key: ">"}, count=500))
            r.xack(key, "bench", *(i for i, _ in entries))
            done += len(entries)
        rate = done / (time.perf_counter() - start)
        span.stop()
        return rate
    finally:
        r.delete(key)
        r.close()


# -- the gateway ----------------------------------------------------------------------------------


def fresh_topic(admin_port: int, partitions: int, kind: str) -> str:
    """A fresh topic of `partitions`, made through the admin API as an operator would."""
    topic = f"bench-wm-{kind}-{uuid.uuid4().hex[:6]}"
    create_topic(admin_port, topic, partitions)
    return topic


async def gateway_send(port: int, topic: str, producers: int, seconds: float,
                       span: CpuSpan) -> tuple[float, list[float]]:
    """Watermarks per second with `producers` (each on its own connection) sending at once, each
    waiting for its receipt; and each send_watermark's milliseconds."""
    from gateway.client import Client

    latencies: list[float] = []
    clients = [await Client.connect(f"gateway://127.0.0.1:{port}") for _ in range(producers)]
    try:
        senders = [await c.create_producer(topic, f"producer-{i:02d}") for i, c in enumerate(clients)]
        span.start()
        start = time.perf_counter()
        deadline = start + seconds

        async def run(producer: Producer) -> int:
            sent = 0
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                await producer.send_watermark(now_ms())
                latencies.append((time.perf_counter() - t0) * 1000)
                sent += 1
            return sent

        rate = sum(await asyncio.gather(*(run(p) for p in senders))) / (time.perf_counter() - start)
        span.stop()
    finally:
        for c in clients:
            await c.close()
    return rate, latencies


async def gateway_lookup(port: int, topic: str, seconds: float, span: CpuSpan) -> tuple[float, list[float]]:
    """client.watermark at the end of a one-partition topic with 200 marks of 8 producers written."""
    from gateway.client import Client

    latencies: list[float] = []
    async with await Client.connect(f"gateway://127.0.0.1:{port}") as client:
        producers = [await client.create_producer(topic, f"producer-{i:02d}") for i in range(8)]
        for i in range(200):
            await producers[i % 8].send_watermark(1000 + i)

        span.start()
        start = time.perf_counter()
        done = 0
        while time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            await client.watermark(topic, {0: 1 << 50})
            latencies.append((time.perf_counter() - t0) * 1000)
            done += 1
        rate = done / (time.perf_counter() - start)
        span.stop()
        for p in producers:
            await p.close()
    return rate, latencies


async def gateway_consume(port: int, topic: str, count: int, with_marks: bool, span: CpuSpan) -> float:
    """Messages per second received and acknowledged by one consumer from the start of a topic
    written in runs of `EVERY` messages, each run followed by a W_SET when `with_marks`."""
    from gateway.client import Client

    payload = os.urandom(SIZE)
    async with await Client.connect(f"gateway://127.0.0.1:{port}") as client:
        producer = await client.create_producer(topic, "producer-00")
        for run in range(count // EVERY):
            await asyncio.gather(*(producer.send(payload) for _ in range(EVERY)))
            if with_marks:
                await producer.send_watermark(run)
        span.start()
        start = time.perf_counter()
        consumer = await client.subscribe(topic, "bench", initial_position="earliest")
        acks: list[asyncio.Future[None]] = []
        for _ in range(count // EVERY * EVERY):
            msg = await consumer.receive(timeout=30)
            acks.append(asyncio.ensure_future(consumer.acknowledge(msg)))
            if len(acks) >= 1000:
                await asyncio.gather(*acks)
                acks.clear()
        await asyncio.gather(*acks)
        rate = count // EVERY * EVERY / (time.perf_counter() - start)
        span.stop()
        await consumer.close()
        await producer.close()
    return rate


def _latency_row(what: str, size: int, rate: float, latencies: list[float], span: CpuSpan, baseline: str = "",
                 base_rate: float = 0.0) -> Row:
    return Row(what, size, rate, baseline, base_rate, percentile(latencies, 0.5), percentile(latencies, 0.99),
               cpu_us=span.per_record(rate))


def measure_watermarks(url: str, seconds: float) -> list[Row]:
    """Every row of `gateway bench --watermarks` (the records/s column counts watermarks, lookups or
    messages as the row says)."""
    rows: list[Row] = []
    size = len(_marker()[0])
    redis = redis_servers(url)
    with running_gateway(url) as ports:
        native, admin = ports["native"], ports["admin"]
        servers: list[Server] = gateway_servers([ports], url)
        for partitions in (1, 16):
            for in_flight in (1, IN_FLIGHT):
                raw_span, span = CpuSpan(redis), CpuSpan(servers)
                rate, lat = raw_send(url, partitions, in_flight, seconds, raw_span)
                raw = f"XADD+ZADD, {in_flight}/trip"
                rows.append(_latency_row(f"raw: XADD+ZADD x{partitions}, {in_flight}/trip", size, rate, lat, raw_span))
                topic = fresh_topic(admin, partitions, "send")
                rate_gw, lat_gw = run_client(gateway_send(native, topic, in_flight, seconds, span))
                rows.append(_latency_row(f"send_watermark, {partitions} part, {in_flight} prod", size,
                                         rate_gw, lat_gw, span, raw, rate))
        raw_span, span = CpuSpan(redis), CpuSpan(servers)
        rate, lat = raw_lookup(url, seconds, raw_span)
        rows.append(_latency_row("raw: ZREVRANGEBYSCORE+HGET+ZRANGE", 0, rate, lat, raw_span))
        rate_gw, lat_gw = run_client(gateway_lookup(native, fresh_topic(admin, 1, "lookup"), seconds, span))
        rows.append(_latency_row("client.watermark after 200 marks", 0, rate_gw, lat_gw, span,
                                 "raw lookup", rate))
        raw_rate, raw_us = best_spanned(2, redis, lambda span: raw_consume(url, MESSAGES, span))
        rows.append(Row("raw: XREADGROUP+XACK", SIZE, raw_rate, cpu_us=raw_us))
        plain, plain_us = best_spanned(2, servers, lambda span: run_client(
            gateway_consume(native, fresh_topic(admin, 1, "plain"), MESSAGES, False, span)))
        rows.append(Row("native consume+ack", SIZE, plain, "XREADGROUP", raw_rate, cpu_us=plain_us))
        marked, marked_us = best_spanned(2, servers, lambda span: run_client(
            gateway_consume(native, fresh_topic(admin, 1, "marked"), MESSAGES, True, span)))
        rows.append(Row(f"  same, a W_SET every {EVERY}", SIZE, marked, "XREADGROUP", raw_rate, cpu_us=marked_us))
        rows.append(Row("  same, against no markers", SIZE, marked, "no markers", plain))
    return rows
