"""`gateway bench --txn`: committed Kafka transactions per second and their latency, beside
MULTI/EXEC of the same records to as many streams, with the servers' CPU per transaction."""

from __future__ import annotations

import multiprocessing
import os
import uuid
from concurrent.futures import ProcessPoolExecutor
from threading import Barrier

from gateway.bench.common import (
    PER_TXN,
    SIZE,
    CpuSpan,
    Row,
    create_kafka_topic,
    gateway_servers,
    kafka_transactions,
    percentile,
    raw_client,
    redis_servers,
    running_gateway,
    timed_steps,
)

NOTE = (f"(records/s column: transactions per second, {PER_TXN} records of {SIZE} B each; cpu µs/rec: the "
        "servers' CPU per transaction; many producers are timed together once all are initialised)")
PRODUCERS = 16  # transactional producers at once, for the aggregate row (--producers)


def raw_multi_exec(url: str, partitions: int, per_txn: int, size: int, seconds: float,
                   span: CpuSpan | None = None) -> tuple[float, list[float]]:
    """The raw-Redis counterpart of a transaction: MULTI/EXEC of the same records to N streams (one
    hash tag for all, as a MULTI/EXEC stays within one slot of a cluster)."""
    r = raw_client(url)
    run = uuid.uuid4().hex
    keys = [f"bench:txn:{{{run}}}:{p}" for p in range(partitions)]
    value = os.urandom(size)

    def step() -> int:
        pipe = r.pipeline(transaction=True)
        for i in range(per_txn):
            pipe.xadd(keys[i % partitions], {"v": value})
        pipe.execute()
        return 1

    try:
        return timed_steps(seconds, step, span)
    finally:
        r.delete(*keys)
        r.close()




def _one_of_many(bootstrap: str, topic: str, partitions: int, seconds: float,
                 barrier: Barrier) -> tuple[float, list[float]]:
    """One of the concurrent producers (in its own process): it waits at `barrier` once
    initialised and again once its clock has stopped."""
    return kafka_transactions(bootstrap, topic, partitions, PER_TXN, SIZE, seconds, ready=barrier.wait)


def concurrent_transactions(bootstrap: str, topic: str, partitions: int, producers: int, seconds: float,
                            span: CpuSpan) -> tuple[float, list[float]]:
    """Transactions per second of `producers` confluent-kafka producers at once, each in its own
    process, and every transaction's latency. `span` runs from the moment all have finished
    `init_transactions` (a barrier) to the moment all have stopped their clocks: client start-up
    (ApiVersions, Metadata, InitProducerId) is not steady state and stays out of it."""
    spawn = multiprocessing.get_context("spawn")
    with spawn.Manager() as manager, ProcessPoolExecutor(max_workers=producers, mp_context=spawn) as pool:
        barrier = manager.Barrier(producers + 1)
        runs = [pool.submit(_one_of_many, bootstrap, topic, partitions, seconds, barrier) for _ in range(producers)]
        barrier.wait()
        span.start()
        barrier.wait()
        span.stop()
        results = [run.result() for run in runs]
    latencies = [ms for _, lats in results for ms in lats]  # one per transaction
    return len(latencies) / span.wall, latencies


def measure_txn(url: str, seconds: float, producers: int = PRODUCERS) -> list[Row]:
    """Every row of `gateway bench --txn`: on 1 and 10 partitions, the raw baseline, one producer
    through the gateway, and `producers` of them at once."""
    rows: list[Row] = []
    with running_gateway(url) as ports:
        bootstrap = f"127.0.0.1:{ports['kafka']}"
        redis, servers = redis_servers(url), gateway_servers([ports], url)
        for partitions in (1, 10):
            topic = f"bench-txn-{partitions}-{uuid.uuid4().hex[:6]}"
            create_kafka_topic(bootstrap, topic, partitions)
            span = CpuSpan(redis)
            base, base_lat = raw_multi_exec(url, partitions, PER_TXN, SIZE, seconds, span)
            rows.append(Row(f"raw redis: MULTI/EXEC to {partitions} stream(s)", SIZE, base,
                            p50_ms=percentile(base_lat, 0.5), p99_ms=percentile(base_lat, 0.99),
                            cpu_us=span.per_record(base)))
            span = CpuSpan(servers)
            rate, lat = kafka_transactions(bootstrap, topic, partitions, PER_TXN, SIZE, seconds, span)
            rows.append(Row(f"kafka txns/s, {partitions} partition(s)", SIZE, rate, "MULTI/EXEC", base,
                            percentile(lat, 0.5), percentile(lat, 0.99), cpu_us=span.per_record(rate)))
            span = CpuSpan(servers)
            rate, lat = concurrent_transactions(bootstrap, topic, partitions, producers, seconds, span)
            rows.append(Row(f"kafka txns/s, {producers} producers, {partitions} partition(s)", SIZE, rate,
                            "MULTI/EXEC", base, percentile(lat, 0.5), percentile(lat, 0.99),
                            cpu_us=span.per_record(rate)))
    return rows
