"""Topic ids (KIP-516): each topic's id is one for every gateway and survives restarts, a topic
created again under its name gets a new one, and the APIs that name topics by id (Metadata v12+,
Fetch v13+, DeleteTopics v6) never take one incarnation for another."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable

import confluent_kafka as ck
import msgpack
import pytest
from kio.schema.errors import ErrorCode as KafkaError

from gateway.formats.records import build_batch, iter_records
from gateway.kafka.dispatch import ApiKey, load_handlers, supported
from gateway.server.gateway import Gateway
from gateway.store import keys
from tests.conftest import kafka_bootstrap, test_config
from tests.kafka_clients import TIMEOUT
from tests.test_gateways import ask

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster

pytestmark = pytest.mark.kafka

load_handlers()
FETCH_BY_ID = range(13, next(r.max_version for r in supported() if r.api_key == ApiKey.FETCH) + 1)


@pytest.fixture
async def two(redis_url: str) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """Two gateways over one Redis."""
    a, b = Gateway(test_config(redis_url)), Gateway(test_config(redis_url))
    await a.start()
    await b.start()
    try:
        yield a, b
    finally:
        await b.stop()
        await a.stop()


async def topic_id(gw: Gateway, name: str, version: int = 12) -> uuid.UUID:
    resp = await ask(gw, ApiKey.METADATA, version, {"topics": [{"name": name, "topic_id": None}],
                                                    "allow_auto_topic_creation": False})
    [t] = resp.topics
    assert t.error_code == KafkaError.none and t.topic_id is not None
    return t.topic_id


async def produce(gw: Gateway, name: str, value: bytes) -> None:
    [r] = await gw.services.log.append([(name, 0, build_batch([(None, value, [])]))])
    assert not isinstance(r.result, Exception)


async def fetch(gw: Gateway, version: int, tid: uuid.UUID | None, name: str = "") -> tuple[KafkaError, list[bytes | None]]:
    """One partition's error and record values, from a fetch naming the topic by id (or name)."""
    resp = await ask(gw, ApiKey.FETCH, version, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic_id": tid, "topic": name,
                    "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
    })
    [t] = resp.responses
    assert (t.topic_id if version >= 13 else t.topic) == (tid if version >= 13 else name)
    [p] = t.partitions
    return p.error_code, [r.value for r in iter_records(p.records)] if p.records else []


async def test_every_gateway_names_a_topic_by_one_id_and_a_restart_keeps_it(redis_url, two):
    a, b = two
    await a.services.log.create_topic("ids", 2)
    first = await topic_id(a, "ids")
    assert await topic_id(b, "ids") == first
    assert await topic_id(b, "ids", version=10) == first
    listed = await ask(b, ApiKey.METADATA, 12, {"topics": None})
    assert [t.topic_id for t in listed.topics if t.name == "ids"] == [first]
    await a.stop()
    again = Gateway(test_config(redis_url))
    await again.start()
    try:
        assert await topic_id(again, "ids") == first
        by_id = await ask(again, ApiKey.METADATA, 12, {"topics": [{"name": None, "topic_id": first}]})
        [t] = by_id.topics
        assert (t.error_code, t.name, t.topic_id, len(t.partitions)) == (KafkaError.none, "ids", first, 2)
    finally:
        await again.stop()
        await a.start()  # the fixture stops it


async def test_a_topic_stored_without_an_id_gets_one_both_gateways_agree_on(two, raw_redis):
    a, b = two
    await a.services.log.create_topic("older", 1)
    record = msgpack.unpackb(await raw_redis.hget(keys.TOPICS, "older"), raw=False)
    del record["id"]  # as topics were stored before they had ids
    await raw_redis.hset(keys.TOPICS, "older", msgpack.packb(record))
    ids = await asyncio.gather(topic_id(a, "older"), topic_id(b, "older"), topic_id(a, "older"))
    assert len(set(ids)) == 1
    assert await topic_id(b, "older") == ids[0]


@pytest.mark.parametrize("version", FETCH_BY_ID)
async def test_fetch_by_id_never_reads_a_topic_created_again_under_the_name(two, version):
    """Gateway `a` has seen the old id; `b` deletes the topic and makes it again: `a` answers the
    old id UNKNOWN_TOPIC_ID (a client refreshes its metadata), never with the new topic's data."""
    a, b = two
    await b.services.log.create_topic("again", 1)
    await produce(b, "again", b"old")
    old = await topic_id(a, "again")
    assert await fetch(a, version, old) == (KafkaError.none, [b"old"])

    await b.services.log.delete_topic("again")
    assert await fetch(a, version, old) == (KafkaError.unknown_topic_id, [])
    await b.services.log.create_topic("again", 1)
    await produce(b, "again", b"new")
    assert await fetch(a, version, old) == (KafkaError.unknown_topic_id, [])

    new = await topic_id(a, "again")
    assert new != old
    assert await fetch(a, version, new) == (KafkaError.none, [b"new"])
    assert await fetch(b, version, old) == (KafkaError.unknown_topic_id, [])
    assert await fetch(a, 12, None, "again") == (KafkaError.none, [b"new"])  # by name: whatever has it now


async def test_fetch_of_an_id_no_topic_has(two):
    a, _ = two
    assert await fetch(a, FETCH_BY_ID[-1], uuid.uuid4()) == (KafkaError.unknown_topic_id, [])
    assert await fetch(a, 13, None) == (KafkaError.unknown_topic_id, [])  # the zero id


async def test_create_topics_answers_the_new_id_and_a_topic_made_again_gets_another(two):
    a, b = two
    values = {"topics": [{"name": "made", "num_partitions": 1, "replication_factor": -1, "assignments": [],
                          "configs": []}], "timeout": 5000, "validate_only": False}
    [made] = (await ask(a, ApiKey.CREATE_TOPICS, 7, values)).topics
    assert made.error_code == KafkaError.none and made.topic_id == await topic_id(b, "made")
    await b.services.log.delete_topic("made")
    [again] = (await ask(b, ApiKey.CREATE_TOPICS, 7, values)).topics
    assert again.error_code == KafkaError.none and again.topic_id not in (None, made.topic_id)
    assert await topic_id(a, "made") == again.topic_id


async def test_delete_topics_by_id(two):
    a, b = two
    await a.services.log.create_topic("doomed", 1)
    old = await topic_id(a, "doomed")
    await b.services.log.delete_topic("doomed")
    await b.services.log.create_topic("doomed", 1)
    new = await topic_id(b, "doomed")
    unknown = uuid.uuid4()

    resp = await ask(a, ApiKey.DELETE_TOPICS, 6, {"timeout": 5000, "topics": [
        {"name": None, "topic_id": old},  # a gone incarnation's id deletes nothing, not its successor
        {"name": None, "topic_id": unknown},
        {"name": "doomed", "topic_id": new},
    ]})
    assert [(r.name, r.topic_id, r.error_code) for r in resp.responses] == [
        (None, old, KafkaError.unknown_topic_id),
        (None, unknown, KafkaError.unknown_topic_id),
        ("doomed", new, KafkaError.invalid_request),
    ]
    assert await topic_id(b, "doomed") == new

    resp = await ask(a, ApiKey.DELETE_TOPICS, 6, {"timeout": 5000, "topics": [{"name": None, "topic_id": new}]})
    assert [(r.name, r.topic_id, r.error_code) for r in resp.responses] == [("doomed", new, KafkaError.none)]
    assert [t.name for t in await b.services.log.list_topics()] == []

    await a.services.log.create_topic("named", 1)
    named = await topic_id(a, "named")
    resp = await ask(b, ApiKey.DELETE_TOPICS, 6, {"timeout": 5000, "topics": [{"name": "named", "topic_id": None}]})
    assert [(r.name, r.topic_id, r.error_code) for r in resp.responses] == [("named", named, KafkaError.none)]


class _Lines(logging.Handler):
    """librdkafka's log lines, as its `logger` hands them over."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def test_librdkafka_fetches_by_id_and_is_told_when_the_topic_was_made_again(gateway):
    """confluent-kafka sends Fetch v16 (topic ids) to a gateway that gives topics ids; once the
    topic is deleted and made again its old id is refused, and the client reads on only after it
    has looked the topic up again."""
    log = gateway.services.log
    await log.create_topic("cycle", 1)
    for i in range(3):
        await produce(gateway, "cycle", b"old-%d" % i)
    lines = _Lines()
    logger = logging.getLogger("tests.librdkafka")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    consumer = ck.Consumer({"bootstrap.servers": kafka_bootstrap(gateway), "group.id": "ids",
                            "enable.auto.commit": False, "debug": "protocol,fetch"}, logger=logger)
    got: list[tuple[int, bytes]] = []

    def poll_until(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not done() and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.value()))

    try:
        consumer.assign([ck.TopicPartition("cycle", 0, 0)])
        await asyncio.to_thread(poll_until, lambda: len(got) == 3)
        assert got == [(i, b"old-%d" % i) for i in range(3)]
        assert any("Sent FetchRequest (v16" in line for line in lines.lines)

        await log.delete_topic("cycle")
        await log.create_topic("cycle", 1)
        for i in range(5):
            await produce(gateway, "cycle", b"new-%d" % i)
        before = len(lines.lines)
        await asyncio.to_thread(poll_until, lambda: len(got) == 5)
        refused = [line for line in lines.lines[before:] if "Fetch failed" in line]
        assert refused and all("UNKNOWN_TOPIC_ID" in line for line in refused)
        # librdkafka goes on from its position in the topic the name has now, as against Kafka
        assert got[3:] == [(3, b"new-3"), (4, b"new-4")]
    finally:
        await asyncio.to_thread(consumer.close)
