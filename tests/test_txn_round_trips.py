"""What a Kafka transaction costs in Redis round trips, request by request: a count no load can move,
unlike a time. The gateway logs each request's count with its time (`gateway.kafka.timing`)."""

from __future__ import annotations

import asyncio
import logging
import re
import time

import confluent_kafka as ck
import pytest

from tests.conftest import kafka_bootstrap

REDIS_BACKENDS = ("single", "cluster")

pytestmark = pytest.mark.kafka
TIMEOUT = 30.0
_LINE = re.compile(r"^(\w+) v\d+ correlation \d+ .*: [\d.]+ ms, (\d+) Redis round trips?$")

# Most round trips one request of a transaction may take (10 records over two partitions, then the
# consumer's offsets): what a transaction's commit latency is made of.
BOUNDS = {
    # the partitions told to expect the transaction's first batch, then the coordinator's step, which
    # waits for the replicas (KIP-890 part 1; as Kafka's coordinator writes its replicated log)
    "add_partitions_to_txn": 2,
    "produce": 1,
    "add_offsets_to_txn": 1,
    "txn_offset_commit": 5,  # the transaction, the group read as streams, consumer and classic side by side, the staging
    "end_txn": 3,  # the point of no return, then every partition's marker in one round trip beside the offsets
}


async def test_round_trips_per_transaction_request(gateway, caplog, request):
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic("rt-in", 1)
    await gateway.services.log.create_topic("rt-out", 2)

    def run(rounds: int) -> None:
        src = ck.Producer({"bootstrap.servers": bs})
        for i in range(rounds):
            src.produce("rt-in", value=b"in-%d" % i)
        assert src.flush(TIMEOUT) == 0
        consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": "rt", "enable.auto.commit": False,
                                "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        consumer.subscribe(["rt-in"])
        producer = ck.Producer({"bootstrap.servers": bs, "transactional.id": "rt-worker", "linger.ms": 5})
        producer.init_transactions(TIMEOUT)
        try:
            done = 0
            deadline = time.monotonic() + TIMEOUT
            while done < rounds and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                producer.begin_transaction()
                for i in range(10):
                    producer.produce("rt-out", value=b"%d-%d" % (done, i), partition=i % 2)
                producer.send_offsets_to_transaction(
                    [ck.TopicPartition("rt-in", 0, msg.offset() + 1)], consumer.consumer_group_metadata(), TIMEOUT)
                producer.commit_transaction(TIMEOUT)
                done += 1
            assert done == rounds
        finally:
            consumer.close()

    with caplog.at_level(logging.DEBUG, logger="gateway.kafka.timing"):
        await asyncio.to_thread(run, 3)
    seen: dict[str, list[int]] = {}
    for record in caplog.records:
        if record.name == "gateway.kafka.timing" and (m := _LINE.match(record.getMessage())):
            seen.setdefault(m.group(1), []).append(int(m.group(2)))
    print({api: counts for api, counts in seen.items() if api in BOUNDS})
    # on a cluster the two partitions' steps go to their nodes side by side, one round trip each
    spread = {"add_partitions_to_txn": 1, "end_txn": 1} if "cluster" in request.node.name else {}
    for api, most in BOUNDS.items():
        most += spread.get(api, 0)
        counts = seen[api]
        # the first transaction opens the gateway's connections to Redis: the last two count
        assert max(counts[-2:]) <= most, (api, counts)
    assert len(seen["end_txn"]) == 3


async def test_transactions_commit_after_redis_forgets_the_scripts(gateway, raw_redis):
    """The connections a transaction's scripts go on meet NOSCRIPT after a SCRIPT FLUSH: redis-py
    loads them again and runs them, and the client sees nothing of it."""
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic("rt-flush", 1)

    def commit(producer: ck.Producer, value: bytes) -> None:
        producer.begin_transaction()
        producer.produce("rt-flush", value=value)
        producer.commit_transaction(TIMEOUT)

    producer = ck.Producer({"bootstrap.servers": bs, "transactional.id": "rt-flush"})
    await asyncio.to_thread(producer.init_transactions, TIMEOUT)
    await asyncio.to_thread(commit, producer, b"before")
    await raw_redis.script_flush()  # on a cluster, on every primary
    await asyncio.to_thread(commit, producer, b"after")
    sl = await gateway.services.log.read("rt-flush", 0, 0, 100)
    assert sl.stable == sl.high_watermark == 4  # two records, two commit markers
