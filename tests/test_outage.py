"""Redis restarted under load: producers see retriable errors, nothing acknowledged is lost, and the
gateway (a process of its own, never restarted) serves again as soon as Redis is back."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request

import confluent_kafka as ck
import pytest

from gateway.client import Client
from gateway.formats.records import build_batch
from gateway.kafka.dispatch import ApiKey
from gateway.store.embedded import EmbeddedRedis
from tests.kafka_clients import consume
from tests.kafka_wire import call

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
PARTITIONS = 3
DEADLINE = 60.0


class KafkaLoad:
    """An idempotent confluent-kafka producer sending numbered values until stopped; what was acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: list[bytes] = []
        self.failed: list[ck.KafkaError] = []
        self.stop = threading.Event()
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                     "linger.ms": 5, "message.timeout.ms": 120_000, "partitioner": "murmur2_random"})
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: ck.KafkaError | None, msg: ck.Message) -> None:
        if err is None:
            self.acked.append(msg.value())
        else:
            self.failed.append(err)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                self.producer.produce("durable", f"kafka-{i}".encode(), key=str(i).encode(),
                                      on_delivery=self._delivered)
                i += 1
            except BufferError:  # its local queue is full while Redis is away: wait for room
                pass
            self.producer.poll(0.002)
        assert self.producer.flush(DEADLINE) == 0


async def native_load(url: str, acked: list[bytes], stop: asyncio.Event) -> None:
    """The native producer, windows of 20 sends at a time; its own retries ride out the outage."""
    async with await Client.connect(url) as client:
        producer = await client.create_producer("durable", send_timeout=DEADLINE)
        i = 0
        while not stop.is_set():
            values = [f"native-{i + k}".encode() for k in range(20)]
            i += 20
            await asyncio.gather(*(producer.send(v) for v in values))
            acked.extend(values)


def _describe(admin_url: str) -> dict:
    with urllib.request.urlopen(f"{admin_url}/admin/v2/topics/durable", timeout=10) as r:
        return json.loads(r.read())


async def until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_redis_restart_under_load_loses_nothing_acknowledged(gateway_process, tmp_path):
    redis = EmbeddedRedis(tmp_path / "redis")
    redis.start()
    gateway_process.redis_url = redis.url
    try:
        gateway_process.start()
        log: list[str] = []  # the gateway's output, read all along so its pipe never fills
        threading.Thread(target=lambda: log.extend(gateway_process.proc.stdout), daemon=True).start()
        req = urllib.request.Request(f"{gateway_process.admin_url}/admin/v2/topics", method="POST",
                                     data=json.dumps({"name": "durable", "partitions": PARTITIONS}).encode())
        urllib.request.urlopen(req, timeout=10).close()
        kafka = KafkaLoad(gateway_process.kafka_bootstrap)
        native_acked: list[bytes] = []
        stop = asyncio.Event()
        kafka.thread.start()
        native = asyncio.create_task(native_load(gateway_process.native_url, native_acked, stop))
        await until(lambda: len(kafka.acked) > 300 and len(native_acked) > 300, "load before the outage")

        redis.stop()  # SIGTERM: Redis writes its AOF out and exits
        before = (len(kafka.acked), len(native_acked))
        # what a producer is told meanwhile: its connection closes, as by a leader gone mid-request,
        # so it sends its in-flight produces again in order (docs/kafka-differences.md says why)
        conn = await asyncio.open_connection("127.0.0.1", gateway_process.kafka_port)
        with pytest.raises(asyncio.IncompleteReadError):
            await call(conn, ApiKey.PRODUCE, 9, {
                "transactional_id": None, "acks": -1, "timeout": 1000,
                "topic_data": [{"name": "durable", "partition_data": [
                    {"index": 0, "records": build_batch([(None, b"during the outage", [])])}]}],
            })
        await asyncio.sleep(1.5)  # the outage lasts a while
        redis.start()  # the same port and data dir

        await until(lambda: len(kafka.acked) > before[0] + 300 and len(native_acked) > before[1] + 300,
                    "load to resume once Redis is back")
        stop.set()
        kafka.stop.set()
        await native
        await asyncio.to_thread(kafka.thread.join, DEADLINE)
        assert gateway_process.proc.poll() is None, "the gateway had to be restarted"
        assert kafka.failed == []

        described = await asyncio.to_thread(_describe, gateway_process.admin_url)
        stored: list[bytes] = []
        for p in described["partitions"]:
            records = await consume("confluent", gateway_process.kafka_bootstrap, "durable", p["partition"], 0,
                                    p["high_watermark"])
            stored += [r[3] for r in records]
        acked = kafka.acked + native_acked
        missing = set(acked) - set(stored)
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
        assert len(stored) == len(set(stored)), "a retried send was stored twice"
        assert not [line for line in log if "Traceback" in line], "".join(log)  # an outage is expected, not a bug
        print(f"acknowledged {len(kafka.acked)} kafka and {len(native_acked)} native messages, "
              f"{before} before the restart; stored {len(stored)}")
    finally:
        redis.stop()
