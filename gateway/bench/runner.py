"""`gateway bench`: the gateway measured beside raw Redis, in the same run, on the same Redis.

The gateway runs as its own process (as users run it), over an embedded Redis in a temporary
directory unless `--redis-url` names one (`--cluster`: a local three-primary Redis Cluster);
`--gateways N` runs N of them side by side, the clients bootstrapping from all. Every figure is
printed beside its raw-Redis baseline, spread over as many streams as the topic has partitions,
and the ratio between them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import redis

from gateway.store.connection import CLUSTER_SCHEMES, is_cluster_url
from gateway.store.embedded import EmbeddedCluster, EmbeddedRedis, free_port

T = TypeVar("T")


@dataclass
class Row:
    what: str
    size: int
    records_per_s: float
    baseline: str = ""
    baseline_records_per_s: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    cpu: str = ""  # where the time went: CPU seconds per process

    @property
    def mb_per_s(self) -> float:
        return self.records_per_s * self.size / 1e6

    @property
    def ratio(self) -> str:
        return f"{self.records_per_s / self.baseline_records_per_s:.2f}x" if self.baseline_records_per_s else ""


def print_table(rows: list[Row]) -> None:
    head = f"{'measurement':34} {'size':>6} {'records/s':>11} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8}  vs baseline"
    print(head)
    print("-" * len(head))
    for r in rows:
        lat = (f"{r.p50_ms:8.2f} {r.p99_ms:8.2f}" if r.p50_ms is not None and r.p99_ms is not None
               else f"{'':8} {'':8}")
        vs = f"{r.ratio} of {r.baseline}" if r.baseline else ""
        print(f"{r.what:34} {r.size:6d} {r.records_per_s:11,.0f} {r.mb_per_s:8.1f} {lat}  {vs}")
        if r.cpu:
            print(f"{'':34}   cpu: {r.cpu}")


# -- raw Redis baselines -----------------------------------------------------------------------------


def best_of(runs: int, measure: Callable[[], float]) -> float:
    """The best of a few runs: other work on the machine only ever slows a run down."""
    return max(measure() for _ in range(runs))


def timed_loop(seconds: float, step: Callable[[], int]) -> float:
    """Run `step` (returning how many records it did) for `seconds`; records per second."""
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += step()
    return done / (time.perf_counter() - start)


def timed_steps(seconds: float, step: Callable[[], int]) -> tuple[float, list[float]]:
    """`timed_loop`, with the milliseconds of each step (one round trip each, for latencies)."""
    latencies: list[float] = []

    def timed() -> int:
        t0 = time.perf_counter()
        done = step()
        latencies.append((time.perf_counter() - t0) * 1000)
        return done

    return timed_loop(seconds, timed), latencies


def raw_client(url: str) -> redis.Redis | redis.RedisCluster:
    """A plain client of the same Redis (or cluster) the gateway uses."""
    if is_cluster_url(url):
        scheme, _, rest = url.partition("://")
        return redis.RedisCluster.from_url(f"{CLUSTER_SCHEMES[scheme]}://{rest}")
    return redis.Redis.from_url(url)


def _streams(kind: str, partitions: int) -> list[str]:
    """One stream per partition, each with its own hash tag: on a cluster they spread as partitions do."""
    run = uuid.uuid4().hex
    return [f"bench:{kind}:{{{run}:{p}}}" for p in range(partitions)]


def raw_xadd_per_record(url: str, size: int, seconds: float, pipeline: int = 500, partitions: int = 1) -> float:
    r = raw_client(url)
    keys = _streams("raw", partitions)
    value = os.urandom(size)

    def step() -> int:
        pipe = r.pipeline(transaction=False)
        for i in range(pipeline):
            pipe.xadd(keys[i % partitions], {"v": value})
        pipe.execute()
        return pipeline

    try:
        return timed_loop(seconds, step)
    finally:
        for key in keys:
            r.delete(key)
        r.close()


def raw_xadd_blobs(url: str, size: int, seconds: float, per_blob: int = 500, pipeline: int = 8,
                   partitions: int = 1) -> float:
    """One entry per `per_blob` records: the ceiling of a one-entry-per-batch layout."""
    r = raw_client(url)
    keys = _streams("blob", partitions)
    blob = os.urandom(size * per_blob)

    def step() -> int:
        pipe = r.pipeline(transaction=False)
        for i in range(pipeline):
            pipe.xadd(keys[i % partitions], {"b": blob})
        pipe.execute()
        return pipeline * per_blob

    try:
        return timed_loop(seconds, step)
    finally:
        for key in keys:
            r.delete(key)
        r.close()


def raw_xrange_blobs(url: str, size: int, seconds: float, per_blob: int = 500) -> float:
    """Reading back one-entry-per-batch blobs with XRANGE: the consume ceiling."""
    r = raw_client(url)
    key = f"bench:read:{uuid.uuid4().hex}"
    blob = os.urandom(size * per_blob)
    pipe = r.pipeline(transaction=False)
    for _ in range(200):
        pipe.xadd(key, {"b": blob})
    pipe.execute()

    def step() -> int:
        entries = r.xrange(key, count=50)
        return len(entries) * per_blob

    try:
        return timed_loop(seconds, step)
    finally:
        r.delete(key)
        r.close()


# -- the gateway ----------------------------------------------------------------------------------


@contextmanager
def running_gateway(redis_url: str) -> Iterator[dict[str, int]]:
    ports = {"kafka": free_port(), "native": free_port(), "admin": free_port()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--redis-url", redis_url, "--log-level", "WARNING",
         "--kafka-port", str(ports["kafka"]), "--native-port", str(ports["native"]),
         "--admin-port", str(ports["admin"])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "listening" in line:
            break
    else:
        raise RuntimeError("the gateway did not start")
    try:
        yield {**ports, "pid": proc.pid}
    finally:
        proc.send_signal(2)
        proc.wait(30)


@contextmanager
def running_gateways(redis_url: str, count: int) -> Iterator[list[dict[str, int]]]:
    """`count` gateway processes over one Redis, each on its own ports."""
    with ExitStack() as stack:
        yield [stack.enter_context(running_gateway(redis_url)) for _ in range(count)]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def native_produce(port: int, size: int, seconds: float) -> float:
    """Produce throughput: many sends in flight, the producer batching them."""
    from gateway.client import Client

    topic = f"bench-{uuid.uuid4().hex[:8]}"
    async with await Client.connect(f"gateway://127.0.0.1:{port}") as client:
        producer = await client.create_producer(topic)
        payload = os.urandom(size)
        sent = 0
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
                latencies.append((time.perf_counter_ns() - int.from_bytes(msg.value[:8], "big")) / 1e6)
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


def kafka_produce(bootstrap: str, topic: str, size: int, seconds: float) -> tuple[float, int]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    value = os.urandom(size)
    sent = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(1000):
            while True:
                try:
                    p.produce(topic, value)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    p.poll(0.01)
        sent += 1000
        p.poll(0)
    p.flush(60)
    return sent / (time.perf_counter() - start), sent


def kafka_consume(bootstrap: str, topic: str, partitions: int, expected: int, **conf: object) -> float:
    """The confluent-kafka Python consumer with its default fetch settings (or `conf`), from the start."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, **conf})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 120
    while got < expected and time.monotonic() < deadline:
        msgs = c.consume(10000, 1.0)
        got += sum(1 for m in msgs if m.error() is None)
    elapsed = time.perf_counter() - start
    c.close()
    return got / elapsed


def python_consumer_ceiling(bootstrap: str, topic: str, partitions: int, expected: int, cap: int = 400_000) -> float:
    """Records per second the confluent-kafka Python consumer hands to Python once librdkafka holds
    them all already (fetched beforehand, up to `cap`): the client's own ceiling, which no server
    can lift. A consume row near it is bound by the client."""
    from confluent_kafka import Consumer, TopicPartition

    want = min(expected, cap)
    queued = [0]

    def stats(raw: str) -> None:
        parts = json.loads(raw)["topics"].get(topic, {}).get("partitions", {})
        queued[0] = sum(p["fetchq_cnt"] for k, p in parts.items() if k != "-1")

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "queued.min.messages": want + 1,
                  "queued.max.messages.kbytes": 2097151, "statistics.interval.ms": 50, "stats_cb": stats})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    deadline = time.monotonic() + 120
    while got + queued[0] < want and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(1, 0.05) if m.error() is None)
    start = time.perf_counter()
    drained = 0
    while got + drained < want and time.monotonic() < deadline:
        drained += sum(1 for m in c.consume(10000, 1.0) if m.error() is None)
    elapsed = time.perf_counter() - start
    c.close()
    return drained / elapsed


def kcat_consume(bootstrap: str, topic: str, expected: int) -> float:
    """librdkafka's C consumer (kcat), whose per-record cost is small: what the gateway serves when
    the client is not the limit. Its process start-up counts against it; it stops at the last
    record (`-c`), not after the empty long poll (fetch.wait.max.ms) that would tell it the end."""
    start = time.perf_counter()
    out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
                          "-c", str(expected), "-f", "%o\n"], capture_output=True, text=True, timeout=300,
                         check=True)
    got = out.stdout.count("\n")
    if got < expected:
        raise RuntimeError(f"kcat read {got} of {expected} records")
    return got / (time.perf_counter() - start)


class CpuMeter:
    """CPU seconds spent by this process (the client), the gateways and Redis during a measurement."""

    def __init__(self, gateway_pids: list[int], redis_url: str) -> None:
        self.pids = gateway_pids
        self.redis = raw_client(redis_url)

    def _redis_cpu(self) -> float:
        info = self.redis.info("cpu")
        nodes = [info] if "used_cpu_user" in info else list(info.values())  # a cluster: one per node
        return sum(float(n["used_cpu_user"]) + float(n["used_cpu_sys"]) for n in nodes)

    def _sample(self) -> tuple[float, float, float]:
        gateway = 0.0
        for pid in self.pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            gateway += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        children = resource.getrusage(resource.RUSAGE_CHILDREN)  # a client run as a process
        client = time.process_time() + children.ru_utime + children.ru_stime
        return client, gateway, self._redis_cpu()

    def measure(self, run: Callable[[], float]) -> tuple[float, str]:
        before, t0 = self._sample(), time.perf_counter()
        rate = run()
        after, wall = self._sample(), time.perf_counter() - t0
        client, gateway, rds = (a - b for a, b in zip(after, before, strict=True))
        return rate, f"client {client:.2f} s, gateway {gateway:.2f} s, redis {rds:.2f} s in {wall:.2f} s"


def _measure_consume(url: str, gateways: list[dict[str, int]], bootstrap: str, topic: str, partitions: int,
                     size: int, sent: int, secs: float) -> list[Row]:
    """Consume beside raw XRANGE of the same bytes, each the best of two runs, with the CPU each
    process spent: a consumer that is the limit shows in its own column."""
    read = best_of(2, lambda: raw_xrange_blobs(url, size, secs))
    rows = [Row("raw redis: XRANGE of blobs", size, read)]
    meter = CpuMeter([g["pid"] for g in gateways], url)
    runs = [meter.measure(lambda: kafka_consume(bootstrap, topic, partitions, sent)) for _ in range(2)]
    rate, cpu = max(runs)
    rows.append(Row("kafka consume (confluent)", size, rate, "XRANGE", read, cpu=cpu))
    # librdkafka stops fetching for fetch.queue.backoff.ms (1 s) whenever its prefetch queue is full
    # (64 MB by default), which a server this fast fills in a fraction of that: the Python client
    # then waits idle. Its documented setting for throughput:
    quick = {"fetch.queue.backoff.ms": 10}
    runs = [meter.measure(lambda: kafka_consume(bootstrap, topic, partitions, sent, **quick)) for _ in range(2)]
    rate, cpu = max(runs)
    rows.append(Row("  same, fetch.queue.backoff.ms=10", size, rate, "XRANGE", read, cpu=cpu))
    ceiling = python_consumer_ceiling(bootstrap, topic, partitions, sent)
    rows.append(Row("  its own ceiling (all prefetched)", size, ceiling, "XRANGE", read))
    if shutil.which("kcat"):
        runs = [meter.measure(lambda: kcat_consume(bootstrap, topic, sent)) for _ in range(2)]
        rate, cpu = max(runs)
        rows.append(Row("kafka consume (kcat, C)", size, rate, "XRANGE", read, cpu=cpu))
    return rows


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a client coroutine on uvloop when it is there, as the gateway does."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def raw_multi_exec(url: str, partitions: int, per_txn: int, size: int, seconds: float) -> tuple[float, list[float]]:
    """The raw-Redis counterpart of a transaction: MULTI/EXEC of the same records to N streams."""
    r = redis.Redis.from_url(url)
    keys = [f"bench:txn:{uuid.uuid4().hex}:{p}" for p in range(partitions)]
    value = os.urandom(size)

    def step() -> int:
        pipe = r.pipeline(transaction=True)
        for i in range(per_txn):
            pipe.xadd(keys[i % partitions], {"v": value})
        pipe.execute()
        return 1

    try:
        return timed_steps(seconds, step)
    finally:
        r.delete(*keys)
        r.close()


def kafka_transactions(bootstrap: str, topic: str, partitions: int, per_txn: int, size: int,
                       seconds: float) -> tuple[float, list[float]]:
    """Committed transactions per second with confluent-kafka, each touching every partition."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "linger.ms": 0})
    p.init_transactions(30)
    value = os.urandom(size)
    latencies: list[float] = []

    def step() -> int:
        t0 = time.perf_counter()
        p.begin_transaction()
        for i in range(per_txn):
            p.produce(topic, value=value, partition=i % partitions)
        p.commit_transaction(30)
        latencies.append((time.perf_counter() - t0) * 1000)
        return 1

    return timed_loop(seconds, step), latencies


def _measure_txn(url: str, bootstrap: str, secs: float) -> list[Row]:
    from confluent_kafka.admin import AdminClient, NewTopic

    rows: list[Row] = []
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for partitions in (1, 10):
        topic = f"bench-txn-{partitions}-{uuid.uuid4().hex[:6]}"
        for f in admin.create_topics([NewTopic(topic, partitions)]).values():
            f.result(30)
        per_txn = 10
        base, base_lat = raw_multi_exec(url, partitions, per_txn, 100, secs)
        rows.append(Row(f"raw redis: MULTI/EXEC to {partitions} stream(s)", 100, base,
                        p50_ms=percentile(base_lat, 0.5), p99_ms=percentile(base_lat, 0.99)))
        rate, lat = kafka_transactions(bootstrap, topic, partitions, per_txn, 100, secs)
        rows.append(Row(f"kafka txns/s, {partitions} partition(s)", 100, rate, "MULTI/EXEC", base,
                        percentile(lat, 0.5), percentile(lat, 0.99)))
    return rows


def run_bench(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in str(args.sizes).split(",")]
    with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp:
        embedded: EmbeddedRedis | EmbeddedCluster | None = None
        url = args.redis_url
        if not url:
            embedded = EmbeddedCluster(Path(tmp) / "cluster") if args.cluster else EmbeddedRedis(Path(tmp) / "redis")
            embedded.start()
            url = embedded.url
        try:
            if getattr(args, "delayed", False):
                from gateway.bench.delayed import format_table, run_delayed_bench

                print(format_table(run_delayed_bench(url, args.count)))
                return
            if getattr(args, "watermarks", False):
                from gateway.bench.watermarks import measure_watermarks

                rows = measure_watermarks(url, float(args.seconds))
                print("(records/s column: watermarks, lookups or messages per second, as each row says)")
            elif getattr(args, "spark", False):
                from gateway.bench.spark import run_spark_bench

                rows = run_spark_bench(url, count=args.records, size=sizes[0], partitions=args.partitions,
                                       cores=args.cores, seconds=float(args.seconds))
            elif getattr(args, "txn", False):
                with running_gateway(url) as ports:
                    rows = _measure_txn(url, f"127.0.0.1:{ports['kafka']}", float(args.seconds))
                print("(records/s column: transactions per second, 10 records of 100 B each)")
            else:
                rows = _measure(args, url, sizes)
        finally:
            if embedded:
                embedded.stop()
    print_table(rows)


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the futures resolve
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)


def _delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_topics([topic]).values():
        f.result(30)


def _measure(args: argparse.Namespace, url: str, sizes: list[int]) -> list[Row]:
    rows: list[Row] = []
    secs = float(args.seconds)
    parts = args.partitions
    with running_gateways(url, args.gateways) as gateways:
        ports = gateways[0]
        for size in sizes:
            if args.kafka:  # each the best of two runs, as the consume rows: the machine's noise is not ours
                base = best_of(2, lambda s=size: raw_xadd_per_record(url, s, secs, partitions=parts))
                rows.append(Row("raw redis: pipelined XADD/record", size, base))
                blob = best_of(2, lambda s=size: raw_xadd_blobs(url, s, secs, partitions=parts))
                rows.append(Row("raw redis: XADD per 500-record blob", size, blob))
                topic = f"bench-{uuid.uuid4().hex[:8]}"
                bootstrap = ",".join(f"127.0.0.1:{g['kafka']}" for g in gateways)
                _create_topic(bootstrap, topic, parts)
                runs = [kafka_produce(bootstrap, topic, size, secs) for _ in range(2)]
                rate, sent = max(r for r, _ in runs), sum(n for _, n in runs)
                rows.append(Row("kafka produce (confluent, acks=all)", size, rate, "XADD/record", base))
                rows.append(Row("  same, against the blob ceiling", size, rate, "XADD/blob", blob))
                rows += _measure_consume(url, gateways, bootstrap, topic, parts, size, sent, secs)
                _delete_topic(bootstrap, topic)  # the next size starts with Redis as small as this one did
                continue
            base = raw_xadd_per_record(url, size, secs, partitions=parts)
            rows.append(Row("raw redis: pipelined XADD/record", size, base))
            rate = _run(native_produce(ports["native"], size, secs))
            rows.append(Row("native produce", size, rate, "XADD/record", base))
            p50, p99 = _run(native_latency(ports["native"], size, min(secs, 5.0)))
            rows.append(Row("native e2e latency at 2,000/s", size, 2000.0, p50_ms=p50, p99_ms=p99))
    return rows
