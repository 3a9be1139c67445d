"""A share group over two gateway processes on one Redis: confluent-kafka ShareConsumers fetch each
partition from the gateway Metadata names its leader, and that gateway alone dispatches it (its
partition lease in Redis says so). The records of a multi-partition topic are split with none lost
and none accepted twice, while a second gateway joins, and when one of two is killed with SIGKILL
(the other then serves every partition)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from gateway.store import keys
from gateway.store.connection import connect
from tests.conftest import GatewayProcess
from tests.test_gateway_failover import _drain, gateway_pair

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
TOPIC = "queue"
GROUP = "q"
PARTITIONS = 8
N = 1600
TIMEOUT = 60.0
ARGS = ["--lease-ms", "1500", "--log-level", "WARNING"]


def leaders(bs: str) -> dict[int, int]:
    """Partition -> the node id Metadata names its leader."""
    md = AdminClient({"bootstrap.servers": bs}).list_topics(TOPIC, timeout=10)
    return {p: m.leader for p, m in md.topics[TOPIC].partitions.items()}


def dispatchers(redis_url: str) -> dict[int, int]:
    """Partition -> the node id holding the share group's partition lease (a live one)."""
    async def read() -> dict[bytes | str, bytes | str]:
        r = connect(redis_url)
        try:
            return await r.hgetall(keys.subscription_owners(TOPIC, GROUP))
        finally:
            await r.aclose()

    held = asyncio.run(read())
    now_ms = time.time() * 1000
    return {int(p): int(v.split()[0]) for p, v in held.items() if int(v.split()[1]) > now_ms}


def prepare(bs: str) -> None:
    """The share group starts at the earliest record; the first half of the records written."""
    admin = AdminClient({"bootstrap.servers": bs})
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    (f,) = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[entry])]).values()
    f.result(TIMEOUT)
    produce(bs, range(N // 2))


def produce(bs: str, which: range) -> None:
    """Records `which` of N, spread evenly over the partitions."""
    p = ck.Producer({"bootstrap.servers": bs, "linger.ms": 0, "batch.num.messages": 20})
    for i in which:
        p.produce(TOPIC, b"r%d" % i, partition=i % PARTITIONS)
    assert p.flush(TIMEOUT) == 0


def wait_for(check: object, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} not reached within {timeout}s"
        time.sleep(0.05)


class Members:
    """ShareConsumers of the group in threads, each accepting what it polls; `accepted` holds the
    records whose acknowledgement the gateway confirmed. `pause` lets them finish what they hold."""

    def __init__(self, bootstraps: list[str]) -> None:
        self.accepted: list[tuple[int, int]] = []
        self.lock = threading.Lock()
        self.go = threading.Event()
        self.go.set()
        self.stop = threading.Event()
        self.paused = [threading.Event() for _ in bootstraps]
        self.threads = [threading.Thread(target=self._work, args=(i, bs)) for i, bs in enumerate(bootstraps)]
        for t in self.threads:
            t.start()

    def _work(self, i: int, bs: str) -> None:
        c = ck.ShareConsumer({"bootstrap.servers": bs, "group.id": GROUP, "share.acknowledgement.mode": "explicit"})
        c.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                if not self.go.is_set():
                    self.paused[i].set()
                    self.go.wait()
                    self.paused[i].clear()
                batch = [m for m in c.poll(0.2) if m.error() is None]
                for m in batch:
                    c.acknowledge(m)
                if not batch:
                    continue
                failed = {tp.partition for tp, err in c.commit_sync(10).items() if err is not None}
                with self.lock:
                    self.accepted += [(m.partition(), m.offset()) for m in batch  # type: ignore[misc]
                                      if m.partition() not in failed]
        finally:
            c.close()

    def count(self) -> int:
        with self.lock:
            return len(set(self.accepted))

    def pause(self) -> None:
        self.go.clear()
        for e in self.paused:
            assert e.wait(TIMEOUT)

    def close(self) -> None:
        self.go.set()
        self.stop.set()
        for t in self.threads:
            t.join(TIMEOUT)


@contextlib.contextmanager
def members(bootstraps: list[str]) -> Iterator[Members]:
    m = Members(bootstraps)
    try:
        yield m
    finally:
        m.close()


def every_record() -> list[tuple[int, int]]:
    return sorted((i % PARTITIONS, i // PARTITIONS) for i in range(N))


def test_a_share_group_across_two_gateways_then_one_killed(redis_url: str, tmp_path: Path) -> None:
    with gateway_pair(redis_url, tmp_path, ARGS, {TOPIC: PARTITIONS}) as (a, b):
        prepare(a.kafka_bootstrap)
        # both gateways lead some partitions once each has renewed its registration (a loaded machine
        # may let one lapse for a moment and the other take its partitions until it is back)
        wait_for(lambda: len(set(leaders(a.kafka_bootstrap).values())) == 2, "both gateways leading")
        with members([a.kafka_bootstrap, b.kafka_bootstrap]) as m:
            wait_for(lambda: m.count() >= N // 4, "a quarter of the records accepted")
            wait_for(lambda: dispatchers(redis_url) == leaders(a.kafka_bootstrap), "each partition dispatched by its leader")
            m.pause()  # the consumers finish their acknowledgements before the kill
            b.kill()
            m.go.set()
            produce(a.kafka_bootstrap, range(N // 2, N))
            wait_for(lambda: m.count() >= N, "every record accepted")
            assert set(dispatchers(redis_url).values()) == {a.node_id}  # the survivor serves everything
        assert sorted(m.accepted) == every_record()  # none lost, none accepted twice


def test_a_gateway_joining_takes_its_partitions_over(redis_url: str, tmp_path: Path) -> None:
    a, b = (GatewayProcess(tmp_path / name, redis_url, args=list(ARGS)) for name in ("a", "b"))
    try:
        a.start()
        _drain(a)
        admin = AdminClient({"bootstrap.servers": a.kafka_bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
            f.result(TIMEOUT)
        prepare(a.kafka_bootstrap)
        with members([a.kafka_bootstrap, a.kafka_bootstrap]) as m:
            wait_for(lambda: m.count() >= N // 4, "a quarter of the records accepted")
            assert set(dispatchers(redis_url).values()) == {a.node_id}
            b.start()
            _drain(b)
            wait_for(lambda: len(set(leaders(a.kafka_bootstrap).values())) == 2, "the joined gateway leading")
            produce(a.kafka_bootstrap, range(N // 2, N))
            wait_for(lambda: dispatchers(redis_url) == leaders(a.kafka_bootstrap), "each partition dispatched by its leader")
            wait_for(lambda: m.count() >= N, "every record accepted")
        assert sorted(m.accepted) == every_record()  # none lost, none accepted twice
    finally:
        for gp in (a, b):
            if gp.proc is not None and gp.proc.poll() is None:
                gp.proc.kill()
                gp.proc.wait(10)
