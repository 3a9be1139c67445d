"""Two gateway processes over one Redis (and over a Redis Cluster); one is killed with SIGKILL in the
middle of a stream. confluent-kafka producers, idempotent and transactional, move to the survivor:
every record is there exactly once, and the dead gateway's background roles move too."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.kafka.dispatch import ApiKey, load_handlers
from tests.conftest import GatewayProcess
from tests.kafka_wire import call

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
TOPIC = "failover"
PARTITIONS = 6
N = 3000
KILL_AT = 1000  # records acknowledged before the kill
LEASE_MS = "1500"  # a dead gateway drops out of Metadata (and its roles move) within about this


def _drain(gp: GatewayProcess) -> None:
    """Read the gateway's output all along, so a full pipe never stalls it."""
    assert gp.proc is not None and gp.proc.stdout is not None
    threading.Thread(target=lambda: [None for _ in gp.proc.stdout], daemon=True).start()  # type: ignore[union-attr]


@contextlib.contextmanager
def gateway_pair(
    redis_url: str, tmp_path: Path, args: list[str], topics: dict[str, int]
) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    """Two gateway processes over one Redis, with `topics` (name: partitions) created; killed after."""
    gps = [GatewayProcess(tmp_path / name, redis_url, args=list(args)) for name in ("a", "b")]
    try:
        for gp in gps:
            gp.start()
            _drain(gp)
        admin = AdminClient({"bootstrap.servers": gps[0].kafka_bootstrap})
        for f in admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()]).values():
            f.result(30)
        yield gps[0], gps[1]
    finally:
        for gp in gps:
            if gp.proc is not None and gp.proc.poll() is None:
                gp.proc.kill()
                gp.proc.wait(10)


@pytest.fixture
def pair(redis_url: str, tmp_path: Path) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    with gateway_pair(redis_url, tmp_path, ["--lease-ms", LEASE_MS, "--log-level", "WARNING"], {TOPIC: PARTITIONS}) as p:
        yield p


def roles(gp: GatewayProcess) -> dict[str, int | None]:
    with urllib.request.urlopen(f"{gp.admin_url}/admin/v2/gateways", timeout=10) as resp:
        return {r["role"]: r["node_id"] for r in json.loads(resp.read())["roles"]}


def txn_coordinator(gp: GatewayProcess, transactional_id: str) -> int:
    """The node id FindCoordinator names for a transactional id."""
    return coordinator(gp, transactional_id, 1)


def coordinator(gp: GatewayProcess, key: str, key_type: int) -> int:
    """The node id FindCoordinator names for a group (key type 0) or a transactional id (1)."""
    load_handlers()

    async def ask() -> int:
        conn = await asyncio.open_connection("127.0.0.1", gp.kafka_port)
        try:
            resp = await call(conn, ApiKey.FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]})
        finally:
            conn[1].close()
        return int(resp.coordinators[0].node_id)

    return asyncio.run(ask())


def wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout}s"
        time.sleep(0.05)


def consume_all(bootstrap: str, topic: str = TOPIC, partitions: int = PARTITIONS) -> list[bytes]:
    """Every committed record of the topic, read through one gateway up to each partition's end."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
            done = c.position([TopicPartition(topic, p) for p in range(partitions)])
            if all(tp.offset >= ends[tp.partition] for tp in done):
                return got
        raise AssertionError(f"read {len(got)} records, not to the end of every partition")
    finally:
        c.close()


def expected() -> list[bytes]:
    return sorted(f"m-{i:05d}".encode() for i in range(N))


def test_an_idempotent_producer_loses_and_duplicates_nothing_when_a_gateway_is_killed(pair):
    a, b = pair
    assert roles(b) and set(roles(b).values()) == {a.node_id}  # the first gateway runs every role
    acked: list[bytes] = []
    errors: list[str] = []

    def delivered(err, msg) -> None:
        (errors.append(str(err)) if err else acked.append(msg.value()))

    p = Producer({"bootstrap.servers": f"{a.kafka_bootstrap},{b.kafka_bootstrap}", "enable.idempotence": True,
                  "linger.ms": 5, "batch.num.messages": 50, "message.timeout.ms": 60000})
    killed = False
    for i in range(N):
        p.produce(TOPIC, f"m-{i:05d}".encode(), key=str(i).encode(), on_delivery=delivered)
        p.poll(0.01 if i % 10 == 9 else 0)  # a steady stream of about a thousand a second, not one burst
        if not killed and len(acked) >= KILL_AT:
            a.kill()  # some of what it leads is in flight now
            killed = True
    assert p.flush(90) == 0
    assert killed and errors == []
    assert sorted(acked) == expected()
    assert sorted(consume_all(b.kafka_bootstrap)) == expected()
    wait_for(lambda: set(roles(b).values()) == {b.node_id}, 10, "the survivor holding every role")


def test_a_transactional_producer_commits_each_record_once_when_its_coordinator_is_killed(pair):
    a, b = pair
    if txn_coordinator(a, "failover") == b.node_id:
        a, b = b, a  # `a` is the one to kill: the transactional producer's coordinator
    p = Producer({"bootstrap.servers": f"{a.kafka_bootstrap},{b.kafka_bootstrap}", "linger.ms": 5,
                  "transactional.id": "failover", "transaction.timeout.ms": 30000})
    p.init_transactions(30)
    chunk, i, killed = 100, 0, False
    while i < N:
        p.begin_transaction()
        for j in range(i, min(i + chunk, N)):
            p.produce(TOPIC, f"m-{j:05d}".encode(), key=str(j).encode())
            p.poll(0)
        if not killed and i >= KILL_AT:
            a.kill()  # mid-transaction: its batches, AddPartitions or EndTxn in flight to the dead one
            killed = True
        while True:
            try:
                p.commit_transaction(60)
                i += chunk
                break
            except KafkaException as exc:
                err = exc.args[0]
                if err.txn_requires_abort():
                    p.abort_transaction(60)
                    break  # the whole chunk again, in a new transaction
                if not err.retriable():
                    raise
    assert killed
    assert sorted(consume_all(b.kafka_bootstrap)) == expected()
