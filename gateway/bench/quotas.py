"""`gateway bench --quotas`: what client quotas cost a producer they do not throttle, and how closely
a producer_byte_rate is held.

Overhead: 100 B records produced with confluent-kafka in interleaved rounds, with no quota
configured, with a quota configured for another client (this one's requests pay a dict lookup),
and with a quota that applies but is never reached (each request records its bytes in Redis, one
script call); each against the first, in the same run, the best of rounds whose order rotates. Held: a 10 MB/s quota on a producer that
could go faster, measured after the ten seconds' allowance Kafka's sampled rate gives, over 30 s and
over three whole periods of its window, and the same on Apache Kafka 4.4 (its peer, when tests/jvm is
built)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
from gateway.bench.kafka_broker import KafkaBroker, KafkaMissing, java_command
from gateway.domain.quotas import PRODUCE
from gateway.store import Store
from gateway.store.quotas import Entity

CLIENT = "rdkafka"  # librdkafka's client.id when none is set, as kafka_produce leaves it
RELOAD_S = 1.5  # a gateway reads the quotas at most a second late
WARM_S = 12.0  # past the ten seconds' worth Kafka's sampled rate lets through at once
PERIODS_S = 33.0  # three periods of the sampled rate's window (quota.window.num 11 x 1 s)


def _set(url: str, entity: Entity, value: float | None) -> None:
    async def change() -> None:
        store = Store.open(url)
        await store.quotas.alter([(entity, {PRODUCE: value})])
    run_client(change())
    time.sleep(RELOAD_S)


def held_acks(bootstrap: str, topic: str, size: int, seconds: float) -> list[float]:
    """When each record was acknowledged (seconds from the first), producing 1 KB records as fast as
    the producer may for `seconds`."""
    from confluent_kafka import Producer

    acked: list[float] = []

    def done(err: object, msg: object) -> None:
        if err is None:
            acked.append(time.perf_counter())

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5})
    value = os.urandom(size)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        try:
            p.produce(topic, value, on_delivery=done)
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    p.flush(60)
    return [t - acked[0] for t in acked] if acked else []


def held_rows(who: str, acks: list[float], size: int, quota: float) -> list[Row]:
    """The rate acknowledged over 30 s after the ten seconds' allowance, and over three periods of the
    sampled rate (11 samples of 1 s: what left the window 11 s ago is let through again, so a fast
    producer's rate comes in waves of that period, on Kafka as here, and 30 s catch a wave or not)."""
    def rate(start: float, span: float) -> float:
        return sum(1 for t in acks if start <= t < start + span) / span

    return [Row(f"{who}: produce held by a {quota / 1e6:g} MB/s quota ({span:g} s)", size, rate(WARM_S, span),
                f"the quota, {quota / 1e6:g} MB/s", quota / size) for span in (30.0, PERIODS_S)]


def kafka_held(size: int, quota: float) -> list[Row]:
    """The same producer and quota on Apache Kafka 4.4, its quota set with Kafka's own kafka-configs."""
    with tempfile.TemporaryDirectory(prefix="gateway-bench-kafka-") as tmp, KafkaBroker(Path(tmp)) as kafka:
        create_kafka_topic(kafka.bootstrap, "bench-quotas", 1)
        subprocess.run(java_command("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", kafka.bootstrap,
                                    "--entity-type", "clients", "--entity-name", CLIENT, "--alter", "--add-config",
                                    f"{PRODUCE}={int(quota)}"), check=True, capture_output=True)
        time.sleep(RELOAD_S)
        return held_rows("kafka 4.4", held_acks(kafka.bootstrap, "bench-quotas", size, WARM_S + PERIODS_S), size,
                         quota)


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
        held = held_rows("gateway", held_acks(bs, topic, 1000, WARM_S + PERIODS_S), 1000, quota)
        _set(url, mine, None)
    try:
        peer = kafka_held(1000, quota)
    except KafkaMissing as e:
        print(f"kafka 4.4 left out: {e}", file=sys.stderr)
        peer = []
    return [
        Row("produce, no quota configured", 100, best["none"][0], cpu_us=best["none"][1]),
        Row("produce, a quota for another client", 100, best["other"][0], "no quota", best["none"][0],
            cpu_us=best["other"][1]),
        Row("produce, its own quota never reached", 100, best["applies"][0], "no quota", best["none"][0],
            cpu_us=best["applies"][1]),
        *held,
        *peer,
    ]
