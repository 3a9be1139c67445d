"""Generated wire traffic that writes (issue 29): random but well-formed sequences of requests that
change state, each on a topic (and a group) of its own that the sequence creates on the real Kafka
4.4 broker and on the gateway, the answers compared field by field as the read-only traffic's are
(tests/test_kafka_differential_wire.py; tests/kafka_differences.py sets aside what must differ).

A sequence is CreateTopics, then Produce of record batches (plain, idempotent with the producer id
InitProducerId gave, or with a producer id no broker handed out; sequences and epochs now and then
out of order), InitProducerId bumping the idempotent producer's epoch, CreatePartitions, DeleteRecords, OffsetCommit and ListOffsets in a random order,
then what both logs and the group hold, and sometimes DeleteTopics. Sequences are drawn by
hypothesis from a fixed seed (logged) before any is sent, so a run sends the same requests
on every machine.

CreateTopics is sent at v2-v4: v5+ lists the new topic's configs, an open finding of the corpus
(`create_topics_v5`).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from gateway.formats.records import BatchBuilder
from tests.conftest import eventually, flush, kafka_bootstrap, running_gateway, test_config
from tests.differential import Side, coordinators_ready, side
from tests.kafka_differences import differences, normalise
from tests.test_kafka_differential import T0, serving
from tests.test_kafka_differential_wire import _wire_found

pytestmark = [pytest.mark.jvm, pytest.mark.kafka]
log = logging.getLogger(__name__)

SEQUENCES = 60  # about 700 requests a side
SEED = 2929
UNHANDED_PRODUCER_ID = 4242  # a producer id no InitProducerId gave: Kafka takes its batches all the same

Op = tuple[Any, ...]

PRODUCE = st.tuples(
    st.just("produce"),
    st.sampled_from([0, 0, 0, 0, 1, 3]),  # partition
    st.integers(1, 3),  # records
    st.sampled_from(["plain", "idempotent", "idempotent", "unhanded", "unhanded"]),
    st.sampled_from([0, 0, 1, -1, -1]),  # epoch, from the producer's
    st.sampled_from([0, 0, 0, 1, -1, 3]),  # sequence, from the next expected
    st.sampled_from([-1, 1]),  # acks
    st.integers(3, 12),  # version
)
OPS = st.one_of(
    PRODUCE, PRODUCE, PRODUCE, PRODUCE, PRODUCE, PRODUCE,
    st.tuples(st.just("bump_epoch")),
    st.tuples(st.just("create_partitions"), st.integers(1, 4), st.booleans(), st.integers(0, 3)),
    st.tuples(st.just("delete_records"), st.integers(0, 2), st.sampled_from([-1, 0, 1, 2, 5, 1 << 40]),
              st.integers(0, 2)),
    st.tuples(st.just("commit"), st.integers(0, 3), st.sampled_from([-1, 0, 2, 100]), st.integers(2, 9)),
    st.tuples(st.just("list_offsets"), st.integers(0, 3), st.sampled_from([-2, -1, -3, T0]), st.integers(1, 10)),
)


@st.composite
def sequences(draw: st.DrawFn) -> list[Op]:
    create = ("create_topics", draw(st.integers(1, 3)), draw(st.sampled_from([-1, 1])), draw(st.integers(2, 4)))
    ops = draw(st.lists(OPS, min_size=3, max_size=12))
    end = [("delete_topics", draw(st.integers(1, 5)))] if draw(st.integers(0, 4)) == 0 else []
    return [create, *ops, *end]


@dataclass
class Producer:
    """One broker's idea of a producer: its id and epoch, and the next sequence per partition."""

    producer_id: int
    epoch: int
    next: dict[int, int] = field(default_factory=dict)


@dataclass
class Run:
    """One sequence on one broker."""

    s: Side
    topic: str
    group: str
    producers: dict[str, Producer] = field(default_factory=dict)
    partitions: int = 0

    async def producer(self, kind: str) -> Producer | None:
        if kind == "plain":
            return None
        if kind not in self.producers:
            if kind == "unhanded":
                self.producers[kind] = Producer(UNHANDED_PRODUCER_ID, 3)  # an epoch to go below
            else:
                got = await self.s.call(22, 4, {"transactional_id": None, "transaction_timeout": 60_000,
                                                "producer_id": -1, "producer_epoch": -1})
                assert got["error_code"] == 0, got
                self.producers[kind] = Producer(got["producer_id"], got["producer_epoch"])
        return self.producers[kind]

    async def step(self, op: Op) -> Any:
        kind, *args = op
        return await getattr(self, kind)(*args)

    async def bump_epoch(self) -> Any:
        """InitProducerId naming the idempotent producer (KIP-360's bump): Kafka 4.4 answers a new
        producer id at epoch 0, whose sequences start from 0."""
        p = await self.producer("idempotent")
        assert p is not None
        resp = await self.s.call(22, 4, {"transactional_id": None, "transaction_timeout": 60_000,
                                         "producer_id": p.producer_id, "producer_epoch": p.epoch})
        if resp["error_code"] == 0:
            p.producer_id, p.epoch, p.next = resp["producer_id"], resp["producer_epoch"], {}
        return resp

    async def create_topics(self, partitions: int, replication: int, version: int) -> Any:
        resp = await self.s.call(19, version, {"topics": [{"name": self.topic, "num_partitions": partitions,
                                                           "replication_factor": replication}], "timeout": 10_000})
        if resp["topics"][0]["error_code"] == 0:
            self.partitions = partitions
            await serving(self.s, self.topic, partitions)
        return resp

    async def produce(self, partition: int, n: int, kind: str, epoch_delta: int, seq_delta: int, acks: int,
                      version: int) -> Any:
        p = await self.producer(kind)
        if p is None:
            b = BatchBuilder()
            epoch = sequence = -1
        else:
            epoch = max(0, p.epoch + epoch_delta)
            # a producer's first batch on a partition starts at 0: the gateway refuses a later one,
            # which Kafka takes (docs/kafka-differences.md; test_kafka_idempotence's own test)
            sequence = max(0, p.next[partition] + seq_delta) if partition in p.next else 0
            b = BatchBuilder(producer_id=p.producer_id, producer_epoch=epoch, base_sequence=sequence)
        for i in range(n):
            b.append(b"v%d" % i, b"k%d" % i, [], T0 + i)
        topic_id = await self.s.topic_id(self.topic) if version >= 13 else None
        resp = await self.s.call(0, version, {"acks": acks, "timeout": 10_000, "topic_data": [
            {"name": self.topic, "topic_id": topic_id,
             "partition_data": [{"index": partition, "records": Records(b.build())}]}]})
        part = resp["responses"][0]["partition_responses"][0]
        if p is not None and part["error_code"] == 0:
            p.next[partition], p.epoch = sequence + n, epoch
        return resp

    async def create_partitions(self, count: int, validate_only: bool, version: int) -> Any:
        resp = await self.s.call(37, version, {"topics": [{"name": self.topic, "count": count, "assignments": None}],
                                               "timeout": 10_000, "validate_only": validate_only})
        if resp["results"][0]["error_code"] == 0 and not validate_only:
            self.partitions = count
            await serving(self.s, self.topic, count)
        return resp

    async def delete_records(self, partition: int, offset: int, version: int) -> Any:
        return await self.s.call(21, version, {"topics": [{"name": self.topic, "partitions": [
            {"partition_index": partition, "offset": offset}]}], "timeout": 10_000})

    async def commit(self, partition: int, offset: int, version: int) -> Any:
        return await self.s.call(8, version, {
            "group_id": self.group, "generation_id_or_member_epoch": -1, "member_id": "",
            "retention_time": -1, "topics": [{"name": self.topic, "partitions": [
                {"partition_index": partition, "committed_offset": offset, "committed_metadata": "m"}]}]})

    async def list_offsets(self, partition: int, timestamp: int, version: int) -> Any:
        return await self.s.call(2, version, {"replica_id": -1, "isolation_level": 0, "timeout": 10_000, "topics": [
            {"name": self.topic, "partitions": [{"partition_index": partition, "timestamp": timestamp,
                                                 "current_leader_epoch": -1}]}]})

    async def delete_topics(self, version: int) -> Any:
        resp = await self.s.call(20, version, {"topic_names": [self.topic], "timeout": 10_000})

        async def gone() -> bool:
            meta = await self.s.call(3, 12, {"topics": [{"name": self.topic}], "allow_auto_topic_creation": False})
            return bool(meta["topics"][0]["error_code"] == 3)

        await eventually(gone, 30, f"{self.topic} deleted")
        return resp

    async def state(self) -> Any:
        """What the log and the group hold at the end: each partition's start and end, and the offsets."""
        bounds = [await self.s.call(2, 7, {"replica_id": -1, "topics": [{"name": self.topic, "partitions": [
            {"partition_index": p, "timestamp": ts, "current_leader_epoch": -1}
            for p in range(max(self.partitions, 1))]}]}) for ts in (-2, -1)]
        return [*bounds, await self.s.call(9, 7, {"group_id": self.group, "topics": None})]


@pytest.fixture(scope="module")
async def bootstraps(kafka_broker: Any, redis_server: str) -> Any:
    flush(redis_server)
    async with running_gateway(test_config(redis_server)) as gw:
        for bs in (kafka_broker.bootstrap, kafka_bootstrap(gw)):
            async with side("warm-up", bs) as s:
                await coordinators_ready(s)
        yield kafka_broker.bootstrap, kafka_bootstrap(gw)


API_KEY = {"bump_epoch": 22, "create_topics": 19, "produce": 0, "create_partitions": 37, "delete_records": 21, "commit": 8,
           "list_offsets": 2, "delete_topics": 20, "state": 0}


async def test_generated_writes_get_kafkas_answers(bootstraps: tuple[str, str]) -> None:
    drawn: list[list[Op]] = []
    FUZZ = settings(max_examples=SEQUENCES, database=None, deadline=None, suppress_health_check=list(HealthCheck))

    @FUZZ
    @seed(SEED)
    @given(sequences())
    def collect(seq: list[Op]) -> None:
        drawn.append(seq)

    collect()
    log.info("generated writes: seed %d, %d sequences, %d requests", SEED, len(drawn), sum(map(len, drawn)))
    nonce = uuid.uuid4().hex[:6]
    unexplained: dict[str, str] = {}
    tally: Counter[str] = Counter()  # what Kafka answered, by request and error codes: the traffic's reach
    sent = 0
    for i, seq in enumerate(drawn):
        answers = []
        for bs in bootstraps:
            async with side("broker", bs) as s:
                # named to sort before the read-only traffic's pool topic, whose listings of every
                # topic from it on (DescribeTopicPartitions' cursor) the shared Kafka broker answers
                run = Run(s, f"gen-writes-{nonce}-{i}", f"gen-writes-{nonce}-{i}")
                out = [normalise(await run.step(op), unordered=True) for op in seq]
                if seq[-1][0] != "delete_topics":
                    out.append(normalise(await run.state(), unordered=True))
                answers.append(out)
                sent += len(seq)
        kafka, gateway = answers
        tally.update(f"{op[0]} {sorted(set(re.findall(r'error_code.: (-?[0-9]+)', repr(k))))}"
                     for op, k in zip(seq, kafka, strict=False))
        for op, k, g in zip([*seq, ("state",)], kafka, gateway, strict=False):
            for d in _wire_found(API_KEY[op[0]], differences(k, g)):
                unexplained.setdefault(f"{op[0]} {d.split(':')[0]}", f"sequence {i}: {op}\n  {d}")
    log.info("generated writes: Kafka's answers %s", dict(sorted(tally.items())))
    assert sent >= 300
    assert not unexplained, "\n".join(unexplained.values())
