"""The Jepsen lab and its faults (tests/jepsen/lab.py, faults.py) do what they say: a partition cuts
the links it names and no others, until healed; a one-way cut lets the other way through; the relay
delays; a gateway's clock jump shows nowhere Kafka shows time (LogAppendTime counts on Redis's
clock, gateway/clock.py); and an idempotent acks=all producer in a client namespace loses nothing
through a paused and failed-over primary and a killed gateway (the smoke before the workloads of
tests/jepsen/workloads; tests/test_jepsen_schedules.py runs it under every fault)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from tests.jepsen import faults
from tests.jepsen.lab import Host, Lab, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with Lab(tmp_path_factory.mktemp("jepsen-lab"), "sentinel") as built:
        yield built


def reaches(source: Host, target: Host, port: int = 6379) -> bool:
    """A TCP connection from `source`'s namespace to `target` opens within two seconds."""
    done = subprocess.run(["ip", "netns", "exec", source.ns, sys.executable, "-c",
                           f"import socket; socket.create_connection(({target.ip!r}, {port}), timeout=2)"],
                          capture_output=True)
    return done.returncode == 0


def test_a_partition_cuts_the_links_it_names_and_heals(lab):
    r1, r2, r3 = lab.redis
    cut = faults.Partition("r1|r2", [r1], [r2])
    cut.start()
    try:
        assert not reaches(r1, r2) and not reaches(r2, r1)
        assert reaches(r1, r3) and reaches(r3, r2)
    finally:
        cut.heal()
    assert reaches(r1, r2) and reaches(r2, r1)


def test_a_one_way_cut_lets_the_other_way_through(lab):
    r1, r2, _ = lab.redis
    cut = faults.one_way([r1], [r2])
    cut.start()
    try:
        # a TCP handshake needs both ways, so what gets through is seen at the packet level: a UDP datagram
        received = subprocess.Popen(["ip", "netns", "exec", r1.ns, sys.executable, "-c",
                                     "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                                     f"s.bind(({r1.ip!r}, 5999)); s.settimeout(20); print(s.recv(9).decode())"],
                                    stdout=subprocess.PIPE, text=True)
        send = (f"import socket, time\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                f"while True: s.sendto(b'got it', ({r1.ip!r}, 5999)); time.sleep(0.1)")  # until it arrives
        sender = subprocess.Popen(["ip", "netns", "exec", r2.ns, sys.executable, "-c", send])
        try:
            assert received.communicate(timeout=30)[0].strip() == "got it"
        finally:
            sender.kill()
            sender.wait()
        assert not reaches(r1, r2)
    finally:
        cut.heal()
    assert reaches(r1, r2)


def test_the_relay_delays_a_gateways_redis_traffic(lab):
    g1 = lab.gateways[0]
    ping = ("import socket, time\n"
            f"s = socket.create_connection(({lab.redis[1].ip!r}, 6379))\n"
            "t = time.monotonic(); s.sendall(b'PING\\r\\n'); s.recv(64); print(time.monotonic() - t)")
    delay = faults.Delay(lab, g1, 300)
    delay.start()
    try:
        took = float(g1.run(sys.executable, "-c", ping))
    finally:
        delay.heal()
    assert took >= 0.6  # held 300 ms each way: a lower bound, never a race


def test_a_clock_jump_leaves_log_append_time_alone(lab):
    topic = f"clock-{time.time_ns()}"
    admin = AdminClient({"bootstrap.servers": lab.bootstrap})
    admin.create_topics([NewTopic(topic, 4, 1, config={"message.timestamp.type": "LogAppendTime"})])[topic].result(30)
    jumps = [faults.ClockJump(lab, g, 3600) for g in lab.gateways]
    for j in jumps:
        j.start()
    try:
        stamps: list[int] = []
        before = time.time() * 1000  # this namespace's clock is the Redis hosts' (one machine)
        p = Producer({"bootstrap.servers": lab.bootstrap})
        for partition in range(4):
            p.produce(topic, b"x", partition=partition, on_delivery=lambda err, m: stamps.append(m.timestamp()[1]))
        assert p.flush(30) == 0
    finally:
        for j in jumps:
            j.heal()
    after = time.time() * 1000
    assert len(stamps) == 4 and all(before - 60_000 <= s <= after + 60_000 for s in stamps), (before, stamps, after)


def smoke(lab: Lab, seconds: int, topic: str) -> tuple[subprocess.Popen[str], Path]:
    """The smoke client started in the client namespace, and the file its standard error goes to."""
    log = lab.root / "logs" / f"smoke-{topic}.log"
    with log.open("w") as err:
        proc = subprocess.Popen(["ip", "netns", "exec", lab.clients[0].ns, sys.executable, "-m", "tests.jepsen.smoke",
                                 "--bootstrap", lab.bootstrap, "--seconds", str(seconds), "--topic", topic],
                                stdout=subprocess.PIPE, stderr=err, text=True, cwd=Path(__file__).parents[1])
    return proc, log


def test_nothing_acknowledged_is_lost_through_a_pause_a_failover_and_a_kill(lab):
    client, log = smoke(lab, 12, "smoke-faults")
    # the faults hit the records, not the topic's creation
    wait_for(lambda: "created" in log.read_text().splitlines(), "the topic's creation")
    old = lab.primary()
    pause = faults.Pause(faults.primary_service(lab))
    pause.start()  # long enough for the Sentinels to fail over
    wait_for(lambda: lab.primary() is not old, "the failover")
    pause.heal()
    kill = faults.Kill(lab, lab.gateways[0].services["gateway"])
    kill.start()
    kill.heal()
    out, _ = client.communicate(timeout=300)
    seen = json.loads(out)
    acked, read = {v: (p, o) for v, p, o in seen["acked"]}, {v: (p, o) for v, p, o in seen["read"]}
    assert acked, "something was acknowledged"
    lost = {v: acked[v] for v in acked.keys() - read.keys()}
    assert not lost, f"acknowledged at (partition, offset), then lost: {sorted(lost.items())[:50]}"
    assert len(seen["read"]) == len(read), "duplicates from an idempotent producer"
    # the old primary is back as a replica of the new one: every Redis host serves again
    wait_for(lambda: lab.online_replicas(lab.primary().ip) == 2, "the old primary's rejoin")


CREATE = """
import sys
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
while True:  # an error the gateway answers (REQUEST_TIMED_OUT) is retried, as an operator would
    try:
        admin.create_topics([NewTopic(sys.argv[2], 3, 1)], request_timeout=60)[sys.argv[2]].result(90)
        print("created")
        break
    except KafkaException as exc:
        if exc.args[0].name() == "TOPIC_ALREADY_EXISTS":
            print("exists")
            break
"""


def test_a_topic_created_through_a_failover_is_kept(lab):
    """Found by the first smoke run: a CreateTopics held in a paused primary's socket ran there when it
    resumed, after the failover, and was answered; the old primary then joined the new one as a replica,
    and the topic (with what was produced to it) was gone. Creation now waits for the replicas."""
    topic = f"created-in-failover-{time.time_ns()}"
    old = lab.primary()
    pause = faults.Pause(faults.primary_service(lab))
    pause.start()
    try:
        creating = lab.clients[0].popen([sys.executable, "-c", CREATE, lab.bootstrap, topic],
                                        stdout=subprocess.PIPE, text=True)
        wait_for(lambda: lab.primary() is not old, "the failover")
    finally:
        pause.heal()
    assert creating.communicate(timeout=180)[0].split() in (["created"], ["exists"])
    wait_for(lambda: lab.online_replicas(lab.primary().ip) == 2, "the old primary's rejoin")
    admin = AdminClient({"bootstrap.servers": lab.bootstrap})
    described = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    assert len(described.partitions) == 3
