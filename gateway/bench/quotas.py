"""`gateway bench --quotas`: what client quotas cost a producer they do not throttle, and how closely
a producer_byte_rate is held.

Overhead: 100 B records produced with confluent-kafka in interleaved rounds, with no quota
configured, with a quota configured for another client (this one's requests pay a dict lookup),
and with a quota that applies but is never reached (each request records its bytes in Redis, one
script call); each against the first, in the same run, the best of rounds whose order rotates. Held: a 10 MB/s quota on a producer that
could go faster, measured after the ten seconds' allowance Kafka's sampled rate gives."""

from __future__ import annotations

import os
import time

from gateway.bench.common import (
    CpuSpan,
    Row,
    best_run,
    create_kafka_topic,
    gateway_servers,
    kafka_produce,
    run_client,
    running_gateway,
)
from gateway.domain.quotas import PRODUCE
from gateway.store import Store
from gateway.store.quotas import Entity

CLIENT = "rdkafka"  # librdkafka's client.id when none is set, as kafka_produce leaves it
RELOAD_S = 1.5  # a gateway reads the quotas at most a second late


def _set(url: str, entity: Entity, value: float | None) -> None:
    async def change() -> None:
        store = Store.open(url)
        await store.quotas.alter([(entity, {PRODUCE: value})])
    run_client(change())
    time.sleep(RELOAD_S)


def held_rate(bootstrap: str, topic: str, size: int, warm: float, seconds: float) -> float:
    """Bytes per second acknowledged over `seconds`, after `warm` seconds of producing."""
    from confluent_kafka import Producer

    acked = [0]

    def done(err: object, msg: object) -> None:
        if err is None:
            acked[0] += size

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5})
    value = os.urandom(size)
    start = time.perf_counter()
    mark: tuple[float, int] | None = None
    while (now := time.perf_counter()) - start < warm + seconds:
        if mark is None and now - start >= warm:
            mark = (now, acked[0])
        try:
            p.produce(topic, value, on_delivery=done)
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    assert mark is not None
    end_bytes, end = acked[0], time.perf_counter()
    p.flush(60)
    return (end_bytes - mark[1]) / (end - mark[0])


def measure_quotas(url: str, seconds: float, rounds: int = 6, quota: float = 10e6) -> list[Row]:
    mine: Entity = (("client-id", CLIENT),)
    other: Entity = (("client-id", "someone-else"),)
    with running_gateway(url) as gw:
        bs = f"127.0.0.1:{gw['kafka']}"
        topic = "bench-quotas"
        create_kafka_topic(bs, topic, 1)
        kafka_produce(bs, topic, 100, 1, acks="1")  # connections and metadata warm
        servers = gateway_servers([gw], url)
        runs: dict[str, list[tuple[float, CpuSpan]]] = {"none": [], "other": [], "applies": []}
        for r in range(rounds):
            for case in [*runs][r % 3:] + [*runs][:r % 3]:  # each case first in some round: no order favoured
                _set(url, other, 1e12 if case == "other" else None)
                _set(url, mine, 1e12 if case == "applies" else None)
                span = CpuSpan(servers)
                runs[case].append((kafka_produce(bs, topic, 100, seconds, acks="1", span=span)[0], span))
        best = {case: best_run(done) for case, done in runs.items()}
        _set(url, mine, quota)
        rate = held_rate(bs, topic, 1000, 12.0, 30.0)
        _set(url, mine, None)
    return [
        Row("produce, no quota configured", 100, best["none"][0], cpu_us=best["none"][1]),
        Row("produce, a quota for another client", 100, best["other"][0], "no quota", best["none"][0],
            cpu_us=best["other"][1]),
        Row("produce, its own quota never reached", 100, best["applies"][0], "no quota", best["none"][0],
            cpu_us=best["applies"][1]),
        Row(f"produce held by a {quota / 1e6:g} MB/s quota (30 s)", 1000, rate / 1000,
            f"the quota, {quota / 1e6:g} MB/s", quota / 1000),
    ]
