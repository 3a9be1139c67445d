"""`gateway bench --delayed`: memory, throughput and lateness of delayed delivery on a real Redis.

Phases: (1) schedule `count` messages far in the future (scheduling throughput, memory per message
with index and payload apart); (2) with that backlog waiting, schedule a smaller wave due over a
few seconds, start a fresh scheduler once it is due (time to the first delivery) and tail the log
(lateness p50/p99); (3) drain the whole backlog with the scheduler's clock moved forward (move
throughput). Each delayed message is one single-record batch whose value starts with its
delivery time, so a reader measures lateness from what it reads.
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
from dataclasses import dataclass

from gateway.bench.common import CpuSpan, Server, percentile, redis_servers
from gateway.clock import now_ms
from gateway.domain.delay import DelayRequest, DelayService
from gateway.domain.log import LogService
from gateway.formats.records import build_batch, iter_records
from gateway.store import Store

PARTITIONS = 4
CHUNK = 2000  # requests per schedule call (one script call per partition)
PAD = b"x" * 56  # 64-byte values


@dataclass(frozen=True)
class Metric:
    """A row of this benchmark's own table: its figures are not records per second."""

    metric: str
    value: float
    unit: str
    note: str = ""


def format_metrics(rows: list[Metric]) -> str:
    width = max(len(r.metric) for r in rows)
    return "\n".join(f"{r.metric:<{width}}  {r.value:>14,.2f} {r.unit:<10} {r.note}" for r in rows)


def _msg(at: int) -> bytes:
    return build_batch([(None, struct.pack(">q", at) + PAD, [])])


async def _schedule(svc: DelayService, topic: str, times: list[int], concurrency: int = 4) -> float:
    """Schedule one message per time, round-robin over partitions; returns the seconds taken."""
    sem = asyncio.Semaphore(concurrency)

    async def one(lo: int) -> None:
        reqs = [DelayRequest(topic, i % PARTITIONS, _msg(times[i]), times[i]) for i in range(lo, min(lo + CHUNK, len(times)))]
        async with sem:
            await svc.schedule(reqs)

    start = time.perf_counter()
    await asyncio.gather(*(one(lo) for lo in range(0, len(times), CHUNK)))
    return time.perf_counter() - start


def _cpu_rows(what: str, span: CpuSpan, done: int) -> list[Metric]:
    """The CPU per message of this process (the gateway's delay service runs in it) and of Redis."""
    notes = {"gateway": "this process: the delay service, and the messages built"}
    return [Metric(f"{what} cpu / message, {name}", us, "µs", notes.get(name, "")) for name, us in span.per(done).items()]


async def _bench(redis_url: str, count: int) -> list[Metric]:
    servers = [Server("gateway", os.getpid()), *redis_servers(redis_url)]
    store = Store.open(redis_url)
    log = LogService(store)
    topic = f"bench-delayed-{now_ms()}"
    await log.create_topic(topic, PARTITIONS, {"delayed.delivery.enable": "true"})
    svc = DelayService(store, notify_partition=log.notifier.notify)
    rows: list[Metric] = []
    try:
        # 1: the backlog, due in an hour, spread over ten minutes
        far = now_ms() + 3_600_000
        span = CpuSpan(servers)
        span.start()
        secs = await _schedule(svc, topic, [far + (i * 7919) % 600_000 for i in range(count)])
        span.stop()
        rows.append(Metric("schedule throughput", count / secs, "msg/s", f"{count:,} messages, {PARTITIONS} partitions"))
        rows += _cpu_rows("schedule", span, count)
        stats = [await svc.stats(topic, p) for p in range(PARTITIONS)]
        n = sum(s.messages for s in stats)
        rows.append(Metric("index memory / message", sum(s.index_bytes for s in stats) / n, "bytes",
                           f"{sum(s.buckets for s in stats)} sealed buckets; Pulsar's in-memory index: 24"))
        rows.append(Metric("payload memory / message", sum(s.payload_bytes for s in stats) / n, "bytes",
                           f"holding stream, {len(_msg(0))}-byte batches"))

        # 2: a wave due soon, delivered while the backlog waits
        wave = max(1000, min(count // 10, 100_000))
        window = 10_000
        t_first = now_ms() + int(wave / (count / secs) * 1500) + 1000
        await _schedule(svc, topic, [t_first + i * window // wave for i in range(wave)])
        lateness: list[float] = []
        late_all: list[float] = []
        scheduler = svc.scheduler()
        # start once the same number (100) are due whatever `count` is, so only the backlog varies
        await asyncio.sleep(max(0.0, (t_first + 100 * window // wave - now_ms()) / 1000))
        started = now_ms()
        task = asyncio.create_task(scheduler.run())
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        first_delivery = None
        seen = 0
        while seen < wave:
            got = False
            for p in range(PARTITIONS):
                sl = await log.read(topic, p, offsets[p], 512)
                now = now_ms()
                for e in sl.entries:
                    for r in iter_records(e.batch, e.base_offset):
                        at = struct.unpack(">q", (r.value or b"")[:8])[0]
                        late_all.append(now - at)
                        if at >= started:
                            lateness.append(now - at)
                        seen += 1
                    offsets[p] = e.next_offset
                    got = True
                if got and first_delivery is None:
                    first_delivery = now - started
            if not got:
                await log.notifier.wait([(topic, p) for p in range(PARTITIONS)], 0.05)
        scheduler.stop()
        await task
        rows.append(Metric("scheduler start -> first delivery", float(first_delivery or 0), "ms",
                           f"with {count:,} messages waiting"))
        rows.append(Metric("lateness p50", percentile(lateness, 0.50), "ms", f"{wave:,} messages over {window / 1000:.0f} s"))
        rows.append(Metric("lateness p99", percentile(lateness, 0.99), "ms", "as seen by a reader tailing the log"))
        rows.append(Metric("lateness max", max(lateness, default=float("nan")), "ms", ""))

        # 3: drain the backlog as fast as the scheduler moves it
        drain = DelayService(store, notify_partition=log.notifier.notify, clock=lambda: far + 3_600_000)
        span = CpuSpan(servers)
        span.start()
        start = time.perf_counter()
        moved = await drain.scheduler().step()
        span.stop()
        rows.append(Metric("move throughput", moved / (time.perf_counter() - start), "msg/s",
                           f"{moved:,} moved into the logs in delivery order"))
        rows += _cpu_rows("move", span, moved)
        return rows
    finally:
        await log.delete_topic(topic)
        await store.close()


def measure_delayed(redis_url: str, count: int = 1_000_000) -> list[Metric]:
    """Every row of `gateway bench --delayed`, on `redis_url`; print them with `format_metrics`."""
    return asyncio.run(_bench(redis_url, count))

