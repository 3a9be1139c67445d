"""`gateway serve --workers 2` as a user runs it: two gateway processes on the supervisor's embedded
Redis, as two nodes of one cluster. Metadata spreads partitions over both, a confluent-kafka round
trip loses and duplicates nothing, a worker killed with SIGKILL is served for by the other until
the supervisor has restarted it (and then leads its partitions again), and SIGTERM stops all."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from gateway.store.embedded import EmbeddedRedis, port_free
from tests.conftest import GatewayProcess
from tests.test_gateway_failover import consume_all

pytestmark = [pytest.mark.kafka]
PARTITIONS = 8
PER_BATCH = 80  # records a batch spreads over the partitions, ten each


class Workers(GatewayProcess):
    """A `gateway serve --workers 2` process whose output is read all along, line by line."""

    lines: list[str]
    seen: threading.Condition

    def watch(self) -> None:
        self.lines, self.seen = [self.banner], threading.Condition()
        assert self.proc is not None and self.proc.stdout is not None
        out = self.proc.stdout

        def read() -> None:
            for line in out:
                with self.seen:
                    self.lines.append(line)
                    self.seen.notify_all()

        threading.Thread(target=read, daemon=True).start()

    def wait_line(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        """The first line of output (the banner on) that matches, waiting for it to come."""
        def match() -> re.Match[str] | None:
            return next((m for line in self.lines if (m := re.search(pattern, line))), None)

        with self.seen:
            self.seen.wait_for(lambda: match() is not None, timeout)
            found = match()
        assert found, f"no line matching {pattern!r} within {timeout}s: {''.join(self.lines)}"
        return found

    def node_ids(self) -> list[int]:
        """Each worker's node id, from its banner: 0 and 1 unless the fixture's start was retried on a
        port in use, when the first addresses kept those ids in the embedded Redis."""
        return [int(self.wait_line(rf"worker {i} \(pid \d+\): node id (\d+),").group(1)) for i in range(2)]

    def pids(self) -> list[int]:
        """Each worker's process as last (re)started."""
        with self.seen:
            text = "".join(self.lines)
        return [int(re.findall(rf"worker {i} \(pid (\d+)\)", text)[-1]) for i in range(2)]


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    gp = Workers(tmp_path_factory.mktemp("workers") / "data",
                 args=["--workers", "2", "--lease-ms", "1500"])
    try:
        gp.start(timeout=60)
        gp.watch()
        yield gp
    finally:
        if gp.proc is not None and gp.proc.poll() is None:
            gp.proc.kill()  # the workers and the embedded Redis get SIGTERM from the kernel
            gp.proc.wait(10)
        EmbeddedRedis(gp.data_dir).stop_leftover()


def create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(30)


def leaders(bootstrap: str, topic: str) -> tuple[set[int], list[int]]:
    """The brokers Metadata lists and each partition's leader."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "meta"})
    try:
        md = c.list_topics(topic, timeout=20)
        return set(md.brokers), [md.topics[topic].partitions[p].leader for p in range(PARTITIONS)]
    finally:
        c.close()


def spread(bootstrap: str, topic: str, over: set[int]) -> list[int]:
    """Each partition's leader once Metadata lists the brokers `over` and spreads the partitions
    over them: a worker sees another within a third of the lease after it starts (or within the
    lease after it dies)."""
    deadline = time.monotonic() + 30
    while (got := leaders(bootstrap, topic))[0] != over or set(got[1]) != over:
        assert time.monotonic() < deadline, f"leaders {got}, not spread over {over}"
        time.sleep(0.1)
    return got[1]


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Every value acknowledged (acks=all, idempotent), spread over the partitions by key."""
    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 60000})

    def delivered(err: KafkaError | None, _: Message) -> None:
        if err is not None:
            errors.append(str(err))

    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % PARTITIONS, on_delivery=delivered)
    assert p.flush(90) == 0 and errors == []


def batch(name: str) -> list[bytes]:
    return [f"{name}-{i:03d}".encode() for i in range(PER_BATCH)]


def test_metadata_spreads_partitions_and_a_round_trip_loses_and_duplicates_nothing(workers: Workers) -> None:
    first = f"127.0.0.1:{workers.kafka_port}"  # worker 0; Metadata names worker 1
    create(first, "spread")
    ids = set(workers.node_ids())
    assert spread(first, "spread", ids) == spread(f"127.0.0.1:{workers.kafka_port + 1}", "spread", ids)
    produce(first, "spread", batch("a"))
    assert sorted(consume_all(first, "spread", PARTITIONS)) == batch("a")


def test_a_killed_worker_is_served_for_then_restarted_with_its_partitions(workers: Workers) -> None:
    topic, bootstrap = "killed", f"127.0.0.1:{workers.kafka_port}"
    create(bootstrap, topic)
    produce(bootstrap, topic, batch("before"))
    ids = workers.node_ids()
    led = spread(bootstrap, topic, set(ids))
    assert workers.proc is not None
    supervisor, dead = workers.proc.pid, workers.pids()[1]
    survivor, its_id = ids
    os.kill(supervisor, signal.SIGSTOP)  # no restart yet: the other worker has to serve
    try:
        os.kill(dead, signal.SIGKILL)
        produce(bootstrap, topic, batch("during"))  # acknowledged once worker 1's lease ran out
        assert leaders(bootstrap, topic) == ({survivor}, [survivor] * PARTITIONS)
    finally:
        os.kill(supervisor, signal.SIGCONT)
    workers.wait_line(rf"worker 1 \(pid (?!{dead}\))\d+\): node id {its_id},")  # restarted: its ports, its id
    assert spread(bootstrap, topic, set(ids)) == led  # its share is back
    produce(bootstrap, topic, batch("after"))
    assert sorted(consume_all(bootstrap, topic, PARTITIONS)) == sorted(batch("before") + batch("during") + batch("after"))


def test_sigterm_stops_every_worker_and_the_embedded_redis(workers: Workers) -> None:
    assert workers.proc is not None
    redis_pid = int((workers.data_dir / "redis.pid").read_text())
    pids = [*workers.pids(), redis_pid]
    assert all(Path(f"/proc/{pid}").exists() for pid in pids)
    workers.proc.send_signal(signal.SIGTERM)
    assert workers.proc.wait(60) == 0
    assert [pid for pid in pids if Path(f"/proc/{pid}").exists()] == []  # each stopped and reaped


def serve(data_dir: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", "serve", "--data-dir", str(data_dir), *flags],
                          capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")})


def test_workers_past_the_last_port_is_one_line(tmp_path: Path) -> None:
    run = serve(tmp_path, "--workers", "4", "--kafka-port", "65534")
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr == ("gateway: --workers (GATEWAY_WORKERS) 4 needs kafka ports 65534-65537, past 65535: "
                          "choose a lower --kafka-port (GATEWAY_KAFKA_PORT)\n")


def test_a_worker_that_cannot_start_stops_all_with_one_line(tmp_path: Path) -> None:
    for _ in range(20):  # a port taken, worker 1's (the configured Kafka port + 1), below a free one
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        if port_free(port - 1):
            break
        taken.close()
    with taken:
        run = serve(tmp_path, "--workers", "2", "--kafka-port", str(port - 1), "--native-port", "0",
                    "--admin-port", "0", "--schema-registry-port", "0", "--log-level", "WARNING")
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr == (f"gateway: worker 1: kafka port {port} is in use: choose another with --kafka-port "
                          "(GATEWAY_KAFKA_PORT)\n")
