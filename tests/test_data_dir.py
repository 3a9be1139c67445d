"""The data dir belongs to one gateway at a time: a second `gateway serve` on it refuses in one line,
leaves the first one's Redis alone, and a SIGKILLed holder never leaves the dir stuck."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer

from tests.conftest import GatewayProcess

pytestmark = [pytest.mark.slow, pytest.mark.kafka]


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0


def consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[bytes] = []
    try:
        for _ in range(300):
            if len(out) >= count:
                break
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
    finally:
        c.close()
    return out


def second_serve(gp: GatewayProcess) -> subprocess.CompletedProcess[str]:
    other = GatewayProcess(gp.data_dir)
    return subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--kafka-port", str(other.kafka_port),
         "--native-port", str(other.native_port), "--admin-port", str(other.admin_port),
         "--schema-registry-port", "0", "--data-dir", str(gp.data_dir)],
        capture_output=True, text=True, timeout=60,
    )


def test_a_second_gateway_on_the_same_data_dir_refuses_and_the_first_keeps_serving(gateway_process):
    gateway_process.start()
    produce(gateway_process.kafka_bootstrap, "kept", [b"before"])
    refused = second_serve(gateway_process)
    assert refused.returncode != 0
    lines = (refused.stdout + refused.stderr).strip().splitlines()
    assert len(lines) == 1, lines  # one line, no traceback
    assert f"gateway pid {gateway_process.proc.pid}" in lines[0] and "--data-dir" in lines[0]
    produce(gateway_process.kafka_bootstrap, "kept", [b"after"])  # its Redis was left alone
    assert consume(gateway_process.kafka_bootstrap, "kept", 2) == [b"before", b"after"]


def test_a_sigkilled_holder_leaves_the_data_dir_free_with_its_data(gateway_process):
    gateway_process.start()
    produce(gateway_process.kafka_bootstrap, "kept", [b"acknowledged"])
    gateway_process.kill()
    gateway_process.start()  # at once: the kernel dropped the lock with the process
    assert consume(gateway_process.kafka_bootstrap, "kept", 1) == [b"acknowledged"]
    assert gateway_process.stop() == 0
