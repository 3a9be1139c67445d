"""A share group over two gateway processes on one Redis: confluent-kafka ShareConsumers fetch each
partition from the gateway Metadata names its leader, and that gateway alone dispatches it. The
records of a multi-partition topic are split with none lost and none accepted twice; then one
gateway is killed with SIGKILL and the other serves every partition."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType  # type: ignore[attr-defined]

from tests.test_gateway_failover import gateway_pair

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
TOPIC = "queue"
PARTITIONS = 8
N = 1600
TIMEOUT = 60.0
ARGS = ["--lease-ms", "1500", "--log-level", "WARNING"]


def leaders(bs: str) -> dict[int, int]:
    """Partition -> the node id Metadata names its leader."""
    md = AdminClient({"bootstrap.servers": bs}).list_topics(TOPIC, timeout=10)
    return {p: m.leader for p, m in md.topics[TOPIC].partitions.items()}


def test_a_share_group_across_two_gateways_then_one_killed(redis_url: str, tmp_path: Path) -> None:
    with gateway_pair(redis_url, tmp_path, ARGS, {TOPIC: PARTITIONS}) as (a, b):
        admin = AdminClient({"bootstrap.servers": a.kafka_bootstrap})
        entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
        (f,) = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, "q", incremental_configs=[entry])]).values()
        f.result(TIMEOUT)
        p = ck.Producer({"bootstrap.servers": a.kafka_bootstrap, "linger.ms": 0, "batch.num.messages": 20})
        for i in range(N):
            p.produce(TOPIC, b"r%d" % i, partition=i % PARTITIONS)
        assert p.flush(TIMEOUT) == 0
        led = leaders(a.kafka_bootstrap)
        assert len(set(led.values())) == 2  # both gateways lead some partitions

        accepted: list[tuple[int, int]] = []
        lock = threading.Lock()
        go = threading.Event()
        go.set()
        paused = [threading.Event(), threading.Event()]
        stop = threading.Event()

        def work(i: int, bs: str) -> None:
            c = ck.ShareConsumer({"bootstrap.servers": bs, "group.id": "q", "share.acknowledgement.mode": "explicit"})
            c.subscribe([TOPIC])
            try:
                while not stop.is_set():
                    if not go.is_set():
                        paused[i].set()
                        go.wait()
                        paused[i].clear()
                    batch = [m for m in c.poll(0.2) if m.error() is None]
                    for m in batch:
                        c.acknowledge(m)
                    if not batch:
                        continue
                    failed = {(tp.partition) for tp, err in c.commit_sync(10).items() if err is not None}
                    with lock:
                        accepted.extend((m.partition(), m.offset()) for m in batch  # type: ignore[misc]
                                        if m.partition() not in failed)
            finally:
                c.close()

        threads = [threading.Thread(target=work, args=(i, gp.kafka_bootstrap)) for i, gp in enumerate((a, b))]
        for t in threads:
            t.start()
        try:
            deadline = time.monotonic() + TIMEOUT
            while len(accepted) < N // 2:
                assert time.monotonic() < deadline, f"only {len(accepted)} records accepted"
                time.sleep(0.05)
            go.clear()  # the consumers finish their acknowledgements before the kill
            for e in paused:
                assert e.wait(TIMEOUT)
            with lock:
                before = set(accepted)
            assert {led[p] for p, _ in before} == set(led.values())  # each gateway dispatched its partitions
            b.kill()
            go.set()
            while len(set(accepted)) < N:
                assert time.monotonic() < deadline + TIMEOUT, f"only {len(set(accepted))} of {N} accepted"
                time.sleep(0.05)
        finally:
            go.set()
            stop.set()
            for t in threads:
                t.join(TIMEOUT)
        assert sorted(accepted) == sorted((i % PARTITIONS, i // PARTITIONS) for i in range(N))  # none lost, none twice
