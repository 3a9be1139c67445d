"""`gateway bench --kafka`: Kafka-protocol produce and consume with confluent-kafka (and kcat, when
installed), beside raw XADD of the same bytes (one entry per record, one per 500-record blob) and
raw XRANGE, with the CPU each server process spent per record over the measured interval (and the
client's own, where a consumer may be the limit)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable

from gateway.bench.common import (
    CpuSpan,
    Row,
    Server,
    best_spanned,
    client_cpu,
    create_kafka_topic,
    delete_kafka_topic,
    gateway_servers,
    kafka_consume,
    kafka_produce,
    percentile,
    raw_xadd_blobs,
    raw_xadd_per_record,
    raw_xadd_waited,
    raw_xrange_blobs,
    redis_servers,
    running_gateway,
    running_gateways,
    timed_steps,
    with_replica,
)


def kafka_produce_latencies(bootstrap: str, topic: str, size: int, seconds: float, acks: str) -> list[float]:
    """Milliseconds from produce() to the delivery report of records sent one at a time: what an
    acknowledgement costs, without the queueing of a producer that sends as fast as it can."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0})
    value = os.urandom(size)
    p.produce(topic, value)  # connected and the topic's metadata known before the clock starts
    p.flush(30)

    def one() -> int:
        p.produce(topic, value)
        p.flush(30)
        return 1

    return timed_steps(seconds, one)[1]




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


def kcat_consume(bootstrap: str, topic: str, expected: int, span: CpuSpan) -> float:
    """librdkafka's C consumer (kcat), whose per-record cost is small: what the gateway serves when
    the client is not the limit. Its process start-up counts against it; it stops at the last
    record (`-c`), not after the empty long poll (fetch.wait.max.ms) that would tell it the end."""
    span.start()
    start = time.perf_counter()
    out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
                          "-c", str(expected), "-f", "%o\n"], capture_output=True, text=True, timeout=300,
                         check=True)
    elapsed = time.perf_counter() - start
    span.stop()
    got = out.stdout.count("\n")
    if got < expected:
        raise RuntimeError(f"kcat read {got} of {expected} records")
    return got / elapsed


def _with_client(servers: list[Server], consume: Callable[[CpuSpan], float]) -> tuple[float, dict[str, float], str]:
    """The best of two consume runs with the servers' CPU per record, and the client's (this process
    and the kcat it runs, from its start to its end): a consumer that is the limit shows there."""
    runs = []
    for _ in range(2):
        before, span = client_cpu(), CpuSpan(servers)
        rate = consume(span)
        runs.append((rate, span, client_cpu() - before))
    rate, span, client = max(runs, key=lambda run: run[0])
    return rate, span.per_record(rate), f"client {client / (rate * span.wall) * 1e6:.2f} µs/rec"


def _measure_consume(url: str, servers: list[Server], bootstrap: str, topic: str, partitions: int,
                    size: int, sent: int, secs: float) -> list[Row]:
    """Consume beside raw XRANGE of the same bytes, each the best of two runs, with the CPU each
    process spent per record."""
    read, redis_us = best_spanned(2, redis_servers(url), lambda span: raw_xrange_blobs(url, size, secs, span=span))
    rows = [Row("raw redis: XRANGE of blobs", size, read, cpu_us=redis_us)]
    rate, cpu_us, client = _with_client(servers, lambda span: kafka_consume(bootstrap, topic, partitions, sent,
                                                                           span=span))
    rows.append(Row("kafka consume (confluent)", size, rate, "XRANGE", read, cpu=client, cpu_us=cpu_us))
    # librdkafka stops fetching for fetch.queue.backoff.ms (1 s) whenever its prefetch queue is full
    # (64 MB by default), which a server this fast fills in a fraction of that: the Python client
    # then waits idle. Its documented setting for throughput:
    quick: dict[str, object] = {"fetch.queue.backoff.ms": 10}
    rate, cpu_us, client = _with_client(servers, lambda span: kafka_consume(bootstrap, topic, partitions, sent,
                                                                           quick, span))
    rows.append(Row("  same, fetch.queue.backoff.ms=10", size, rate, "XRANGE", read, cpu=client, cpu_us=cpu_us))
    ceiling = python_consumer_ceiling(bootstrap, topic, partitions, sent)
    rows.append(Row("  its own ceiling (all prefetched)", size, ceiling, "XRANGE", read))
    if shutil.which("kcat"):
        rate, cpu_us, client = _with_client(servers, lambda span: kcat_consume(bootstrap, topic, sent, span))
        rows.append(Row("kafka consume (kcat, C)", size, rate, "XRANGE", read, cpu=client, cpu_us=cpu_us))
    return rows


def _measure_size(url: str, gateways: list[dict[str, int]], size: int, seconds: float, partitions: int) -> list[Row]:
    """The rows of one message size, each the best of two runs: the machine's noise is not ours."""
    redis, servers = redis_servers(url), gateway_servers(gateways, url)
    base, redis_us = best_spanned(2, redis, lambda span: raw_xadd_per_record(url, size, seconds,
                                                                             partitions=partitions, span=span))
    rows = [Row("raw redis: pipelined XADD/record", size, base, cpu_us=redis_us)]
    blob, redis_us = best_spanned(2, redis, lambda span: raw_xadd_blobs(url, size, seconds, partitions=partitions,
                                                                        span=span))
    rows.append(Row("raw redis: XADD per 500-record blob", size, blob, cpu_us=redis_us))
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    bootstrap = ",".join(f"127.0.0.1:{g['kafka']}" for g in gateways)
    create_kafka_topic(bootstrap, topic, partitions)
    sent = [0]

    def produce(span: CpuSpan) -> float:
        rate, count = kafka_produce(bootstrap, topic, size, seconds, span=span)
        sent[0] += count
        return rate

    rate, cpu_us = best_spanned(2, servers, produce)
    rows.append(Row("kafka produce (confluent, acks=all)", size, rate, "XADD/record", base, cpu_us=cpu_us))
    rows.append(Row("  same, against the blob ceiling", size, rate, "XADD/blob", blob))
    idempotent, cpu_us = best_spanned(2, servers, lambda span: kafka_produce(
        bootstrap, topic, size, seconds, span=span, config={"enable.idempotence": True})[0])
    rows.append(Row("  same, idempotent (Java's default)", size, idempotent, "not idempotent", rate, cpu_us=cpu_us))
    rows += _measure_consume(url, servers, bootstrap, topic, partitions, size, sent[0], seconds)
    delete_kafka_topic(bootstrap, topic)  # the next size starts with Redis as small as this one did
    rows.append(_log_append_time_row(servers, bootstrap, size, seconds, partitions, rate))
    return rows


def _log_append_time_row(servers: list[Server], bootstrap: str, size: int, seconds: float, partitions: int,
                         create_time: float) -> Row:
    """Produce to a LogAppendTime topic, whose batches the gateway stamps (a copy and a CRC each),
    against the same produce to a CreateTime topic, stored untouched."""
    topic = f"bench-lat-{uuid.uuid4().hex[:8]}"
    create_kafka_topic(bootstrap, topic, partitions, {"message.timestamp.type": "LogAppendTime"})
    rate, cpu_us = best_spanned(2, servers, lambda span: kafka_produce(bootstrap, topic, size, seconds,
                                                                       span=span)[0])
    delete_kafka_topic(bootstrap, topic)
    return Row("kafka produce, LogAppendTime topic", size, rate, "CreateTime", create_time, cpu_us=cpu_us)


ACKS_NOTE = ("(Redis with one replica. records/s: raw rows pipeline 100 XADDs per round trip, kafka rows "
             "are confluent-kafka with linger.ms 5 producing as fast as they can; p50/p99: one record at a "
             "time, a raw XADD (+WAIT) round trip, or a kafka produce() to its delivery report)")


def measure_acks(url: str, sizes: list[int], seconds: float, partitions: int) -> list[Row]:
    """`gateway bench --kafka --acks all`: what waiting for a replica costs, in raw Redis (XADD, then
    XADD+WAIT 1) and through the gateway (acks=1, then acks=all with min.insync.replicas 1 and 2)."""
    rows: list[Row] = []
    lat_seconds = max(1.0, seconds / 2)
    with with_replica(url), running_gateway(url) as ports:
        bootstrap = f"127.0.0.1:{ports['kafka']}"
        redis, servers = redis_servers(url), gateway_servers([ports], url)  # the primary's CPU, not the replica's
        for size in sizes:
            raw: dict[int, float] = {}
            for replicas, what in ((0, "raw redis: XADD"), (1, "raw redis: XADD + WAIT 1")):
                span = CpuSpan(redis)
                raw[replicas] = raw_xadd_waited(url, size, seconds, replicas, partitions=partitions, span=span)[0]
                lat = raw_xadd_waited(url, size, lat_seconds, replicas, pipeline=1, partitions=partitions)[1]
                rows.append(Row(what, size, raw[replicas], "XADD" if replicas else "", raw[0] if replicas else 0.0,
                                percentile(lat, 0.5), percentile(lat, 0.99), cpu_us=span.per_record(raw[replicas])))
            for acks, min_insync in (("1", 1), ("all", 1), ("all", 2)):
                topic = f"bench-acks-{uuid.uuid4().hex[:8]}"
                create_kafka_topic(bootstrap, topic, partitions, {"min.insync.replicas": str(min_insync)})
                span = CpuSpan(servers)
                rate, _ = kafka_produce(bootstrap, topic, size, seconds, acks, span=span)
                lat = kafka_produce_latencies(bootstrap, topic, size, lat_seconds, acks)
                waits = acks == "all" and min_insync > 1
                rows.append(Row(f"kafka acks={acks}, min.insync.replicas {min_insync}", size, rate,
                                "XADD+WAIT" if waits else "XADD", raw[1 if waits else 0],
                                percentile(lat, 0.5), percentile(lat, 0.99), cpu_us=span.per_record(rate)))
                delete_kafka_topic(bootstrap, topic)
    return rows


def measure_kafka(url: str, sizes: list[int], seconds: float, partitions: int, gateways: int,
                  workers: int = 1) -> list[Row]:
    """Every row of `gateway bench --kafka`, the clients bootstrapping from all `gateways` (each of
    `workers` workers, whose ports Metadata tells them)."""
    rows: list[Row] = []
    with running_gateways(url, gateways, workers) as running:
        for size in sizes:
            rows += _measure_size(url, running, size, seconds, partitions)
    return rows
