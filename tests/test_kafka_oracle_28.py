"""Issue 28's scenarios run against the real Kafka 4.4 broker and the gateway, answers compared.

Each scenario is one function of a bootstrap address that returns what a real client (or a kio wire
request, where exact fields matter) observed; `same_on_both` runs it on both and requires equal
answers. Only what two clusters cannot share is normalised away (node ids, the broker's clock);
anything else that differs is a bug or a line in docs/kafka-differences.md.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

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
from kafka import KafkaProducer
from kio.schema.errors import ErrorCode as KafkaError

from gateway.clock import now_ms
from gateway.formats.records import Compression
from gateway.kafka.configs import RESOURCE_BROKER, RESOURCE_GROUP, SOURCE_DYNAMIC_BROKER
from gateway.kafka.dispatch import ApiKey
from gateway.server.gateway import Gateway
from tests.conftest import eventually, running_gateway, test_config
from tests.kafka_jvm import allowed, same_on_both, unique
from tests.kafka_wire import call
from tests.test_kafka_consumer_groups import Log, Member
from tests.test_kafka_record_errors import _batch, _ck_produce, _watermarks
from tests.test_kafka_share import (
    count,
    fill,
    group_configs,
    held_then_taken,
    offset,
    poll_until,
    poll_values,
    polls,
    produce_sync,
    share_consumer,
    values,
)

pytestmark = [pytest.mark.jvm, pytest.mark.kafka]

TIMEOUT = 30.0
HOUR = 3_600_000
NOT_LEADER, UNKNOWN_TOPIC = KafkaError.not_leader_or_follower, KafkaError.unknown_topic_or_partition


async def wire(bs: str, api_key: int, version: int, values: dict[str, Any]) -> Any:
    """One request on a connection of its own, its decoded response."""
    host, port = bs.rsplit(":", 1)
    conn = await asyncio.open_connection(host, int(port))
    try:
        return await call(conn, api_key, version, values)
    finally:
        conn[1].close()


def create_topics(bs: str, *topics: tuple[str, int, dict[str, str]]) -> None:
    """Create topics and wait until each partition has a leader: Kafka's CreateTopics answers
    before its broker leads them, and a request sent in between is refused."""
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(t, n, config=c) for t, n, c in topics]).values():
        f.result(timeout=TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    for name, partitions, _ in topics:
        while True:
            meta = admin.list_topics(name, timeout=TIMEOUT).topics[name]
            if meta.error is None and len(meta.partitions) == partitions and all(
                    p.leader >= 0 for p in meta.partitions.values()):
                break
            assert time.monotonic() < deadline, f"{name} has no leaders"
            time.sleep(0.05)


def node_id(bs: str) -> int:
    """The id of the one broker (Kafka) or gateway (in-process) at `bs`."""
    [node] = AdminClient({"bootstrap.servers": bs}).list_topics(timeout=TIMEOUT).brokers
    return int(node)


# -- Produce: per-record errors (KIP-467) ------------------------------------------------------------

def _clock_free(message: str | None) -> str | None:
    """A timestamp message's range `[now - before.max, now + after.max]` read from the broker's clock,
    kept as its width."""
    if message is None:
        return None
    return re.sub(r"\[(-?\d+), (-?\d+)\]", lambda m: f"[width {int(m[2]) - int(m[1])}]", message)


def _kp_errors(bs: str, topic: str, keys: list[bytes | None]) -> list[tuple[str, str]]:
    """What kafka-python, which shows the broker's messages, raises for each record of one batch."""
    p = KafkaProducer(bootstrap_servers=bs, linger_ms=1000, retries=0)
    try:
        futures = [p.send(topic, b"v", key=k) for k in keys]
        p.flush(TIMEOUT)
        return [(type(f.exception).__name__, str(f.exception)) for f in futures]
    finally:
        p.close()


async def test_record_errors_match_kafka(gateway, kafka_broker) -> None:
    """A compacted topic's batch with keyless records and a batch with out-of-range timestamps:
    Produce v11's partition errors, messages and record_errors, what confluent-kafka and kafka-python
    report for each record, and that nothing was written."""
    table, clock = unique("table"), unique("clock")
    now = now_ms()

    async def scenario(bs: str) -> object:
        await asyncio.to_thread(create_topics, bs, (table, 1, {"cleanup.policy": "compact"}),
                                (clock, 1, {"message.timestamp.before.max.ms": str(HOUR)}))
        request = {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
            {"name": table, "partition_data": [{"index": 0, "records": _batch(
                [b"a", None, b"c", None, None], [now] * 5, Compression.GZIP)}]},
            {"name": clock, "partition_data": [{"index": 0, "records": _batch(
                [b"a", b"b", b"c", b"d"], [now, now + 2 * HOUR, now - 2 * HOUR, now])}]}]}

        async def led() -> Any:
            """The answer once both partitions are led: a refused batch writes nothing, so it
            may be sent again."""
            resp = await wire(bs, ApiKey.PRODUCE, 11, request)
            codes = {p.error_code for t in resp.responses for p in t.partition_responses}
            return None if codes & {NOT_LEADER, UNKNOWN_TOPIC} else resp

        resp = await eventually(led, TIMEOUT, "the partitions led")
        wire_answer = sorted(
            (t.name, p.index, int(p.error_code), _clock_free(p.error_message),
             [(e.batch_index, _clock_free(e.batch_index_error_message)) for e in p.record_errors])
            for t in resp.responses for p in t.partition_responses)
        keys = [b"k0", None, b"k2", None]
        stamps = [now, now + 2 * HOUR, now - 2 * HOUR, now]
        one_bad = [now, now + 2 * HOUR]
        by_client = await asyncio.to_thread(lambda: [
            _ck_produce(bs, table, [(k, None) for k in keys]),
            _ck_produce(bs, clock, [(b"k", ts) for ts in stamps]),
            _ck_produce(bs, clock, [(b"k", ts) for ts in one_bad]),
            _kp_errors(bs, table, keys),
            [_watermarks(bs, t) for t in (table, clock)]])
        return wire_answer, by_client

    await same_on_both(gateway, kafka_broker, scenario)


# -- Per-broker dynamic configs ------------------------------------------------------------------

BROKER_KEYS = ["log.retention.ms", "message.max.bytes", "log.cleanup.policy", "num.partitions"]
SETTING_SOURCE = allowed("The source of a gateway setting listed under a broker config's name "
                         "(`num.partitions`, `auto.create.topics.enable`, ...)")
SETTINGS = {"num.partitions"}  # read-only here, a gateway setting


def _no_node(text: str | None, node: int) -> str | None:
    """An error message with the broker's own id (and the wrong ids the scenario derives from it)
    written as names."""
    if text is None:
        return None
    return re.sub(r"\b(\d+)\b", lambda m: {str(node): "<node>", str(node + 6): "<node+6>"}.get(m[1], m[1]), text)


async def _describe_broker(bs: str, name: str, node: int) -> object:
    resp = await wire(bs, ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": RESOURCE_BROKER, "resource_name": name, "configuration_keys": BROKER_KEYS}],
        "include_synonyms": True, "include_documentation": False})
    [res] = resp.results
    def source(name: str, value: int) -> object:
        return SETTING_SOURCE if name in SETTINGS else value

    configs = sorted((c.name, c.value, c.read_only, source(c.name, c.config_source), c.is_sensitive,
                      int(c.config_type), [(s.name, s.value, source(c.name, s.source)) for s in c.synonyms])
                     for c in res.configs)
    return int(res.error_code), _no_node(res.error_message, node), configs


async def _incremental(bs: str, name: str, node: int, *changes: tuple[str, int, str | None]) -> object:
    resp = await wire(bs, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": RESOURCE_BROKER, "resource_name": name, "configs": [
            {"name": k, "config_operation": op, "value": v} for k, op, v in changes]}]})
    [res] = resp.responses
    return int(res.error_code), _no_node(res.error_message, node)


def _admin_alter(bs: str, node: int, incremental: bool, **configs: str) -> None:
    """Through confluent-kafka's AdminClient, which sends a broker's configs to that broker: SET
    each config (IncrementalAlterConfigs), or replace the broker's whole set (AlterConfigs)."""
    admin = AdminClient({"bootstrap.servers": bs})
    named = {k.replace("_", "."): v for k, v in configs.items()}
    if incremental:
        resource = ConfigResource(ResourceType.BROKER, str(node), incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in named.items()])
        futures = admin.incremental_alter_configs([resource])
    else:
        futures = admin.alter_configs([ConfigResource(ResourceType.BROKER, str(node), set_config=named)])
    for f in futures.values():
        f.result(timeout=TIMEOUT)


async def test_per_broker_configs_match_kafka(gateway, kafka_broker) -> None:
    """A broker's own dynamic configs: set (IncrementalAlterConfigs), replaced (AlterConfigs), deleted,
    described with sources and synonyms; a read-only config and other brokers' ids refused. The
    broker's own configs are emptied at the end: the Kafka broker serves the whole run."""

    async def scenario(bs: str) -> object:
        node = await asyncio.to_thread(node_id, bs)
        me = str(node)
        seen: list[object] = [await _describe_broker(bs, me, node)]

        async def described_once(key: str, value: str | None) -> None:
            """Kafka's broker applies a change as it replays the controller's record, a moment after
            the answer: wait for that, then record what DescribeConfigs says."""
            async def applied() -> bool:
                _, _, configs = await _describe_broker(bs, me, node)  # type: ignore[misc]
                own = [c[1] for c in configs if c[0] == key and c[3] == SOURCE_DYNAMIC_BROKER]  # DYNAMIC_BROKER_CONFIG
                return own == ([] if value is None else [value])
            await eventually(applied, TIMEOUT, f"{key}={value} applied")
            seen.append(await _describe_broker(bs, me, node))

        try:
            await asyncio.to_thread(_admin_alter, bs, node, True, log_retention_ms="60000", message_max_bytes="5000")
            await described_once("log.retention.ms", "60000")
            await asyncio.to_thread(_admin_alter, bs, node, False, log_retention_ms="120000")
            await described_once("log.retention.ms", "120000")
            seen.append(await _incremental(bs, me, node, ("log.retention.ms", 1, None)))  # DELETE
            await described_once("log.retention.ms", None)
            seen.append(await _incremental(bs, me, node, ("num.partitions", 0, "3")))
            for wrong in (str(node + 6), "x"):
                seen.append(await _incremental(bs, wrong, node, ("log.retention.ms", 0, "1")))
                seen.append(await _describe_broker(bs, wrong, node))
        finally:
            await asyncio.to_thread(_admin_alter, bs, node, False)
        return seen

    await same_on_both(gateway, kafka_broker, scenario)


# -- KIP-848 regular-expression subscriptions -------------------------------------------------------

async def test_regex_matches_come_after_the_literal_topics_as_on_kafka(gateway, kafka_broker) -> None:
    """A consumer-protocol member subscribed to a literal topic and a regex: the sequence of
    assignments it is given (Kafka resolves the regex after the heartbeat that brought it)."""
    plain, prefix = unique("plain"), unique("rx")

    async def scenario(bs: str) -> object:
        await asyncio.to_thread(create_topics, bs, (plain, 1, {}), (f"{prefix}-a", 2, {}))
        log = Log()
        member = Member("a", bs, unique("gx"), log, [plain, f"^{prefix}-.*"]).start()
        try:
            await eventually(lambda: len(member.owned) == 3, TIMEOUT, "both topics assigned")
        finally:
            await member.close()
        with log.lock:
            return [sorted(parts) for _, _, what, parts in sorted(log.events) if what == "assign"]

    await same_on_both(gateway, kafka_broker, scenario)


# -- Classic groups: OffsetCommit of a partition the member does not own ----------------------------

def _commit_for_another_member(bs: str, topic: str) -> object:
    """Two classic confluent-kafka members share a topic; one commits the partition the rebalance
    gave the other, as a client does with a record it fetched just before the rebalance. What the
    commit answered, what the group then holds, and whether a rebalance came of it."""
    conf = {"bootstrap.servers": bs, "group.id": unique("gu"), "enable.auto.commit": False,
            "partition.assignment.strategy": "roundrobin"}
    a, b = ck.Consumer(conf), ck.Consumer(conf)
    members = [a]
    deadline = time.monotonic() + TIMEOUT
    rebalances = threading.Event()

    def poll_until(done: Any) -> None:
        while not done():
            assert time.monotonic() < deadline, "the group did not settle"
            for c in members:
                c.poll(0.05)

    try:
        a.subscribe([topic])
        poll_until(lambda: len(a.assignment()) == 2)
        members.append(b)
        b.subscribe([topic], on_revoke=lambda *_: rebalances.set())
        poll_until(lambda: len(a.assignment()) == len(b.assignment()) == 1)
        [theirs] = b.assignment()
        done = a.commit(offsets=[ck.TopicPartition(topic, theirs.partition, 5)], asynchronous=False)
        [committed] = b.committed([ck.TopicPartition(topic, theirs.partition)], timeout=TIMEOUT)
        for c in members:
            c.poll(0.2)
        return ([(tp.partition == theirs.partition, tp.offset, tp.error) for tp in done or []],
                committed.offset, [tp.partition for tp in b.assignment()] == [theirs.partition],
                rebalances.is_set())
    finally:
        for c in members:
            c.close()


async def test_committing_a_partition_another_member_owns_as_on_kafka(gateway, kafka_broker) -> None:
    topic = unique("owned")

    async def scenario(bs: str) -> object:
        await asyncio.to_thread(create_topics, bs, (topic, 2, {}))
        return await asyncio.to_thread(_commit_for_another_member, bs, topic)

    await same_on_both(gateway, kafka_broker, scenario)


# -- Share groups (KIP-932) ------------------------------------------------------------------------

LOCK_MS = 1000  # the least either allows, as the Kafka broker of the suite is set


@pytest.fixture
async def share_gateway(redis_url: str) -> AsyncIterator[Gateway]:
    """A gateway whose share groups may lock records for as little as LOCK_MS, as the Kafka broker."""
    async with running_gateway(test_config(redis_url, group_share_min_record_lock_duration_ms=LOCK_MS)) as gw:
        yield gw


async def share_topic(bs: str, topic: str, partitions: int, group: str, **configs: str) -> None:
    """A topic and a share group reading it from the earliest record, with the group's `configs`."""
    await asyncio.to_thread(create_topics, bs, (topic, partitions, {}))
    await group_configs(bs, group, share_auto_offset_reset="earliest", **configs)


async def test_acknowledgements_with_no_new_records_as_on_kafka(share_gateway, kafka_broker) -> None:
    """Acknowledgements riding on fetches that find no new records, and on close: what the
    acknowledgement commit callback hears (which offsets, and any error)."""
    topic, group = unique("ackonly"), unique("ackonly")

    async def scenario(bs: str) -> object:
        await share_topic(bs, topic, 1, group)
        await asyncio.to_thread(produce_sync, bs, [b"r%d" % i for i in range(10)], topic)
        heard: list[tuple[dict[Any, list[int]], Any]] = []

        def acked() -> set[int]:
            return {o for offsets, _ in heard for os in offsets.values() for o in os}

        def run() -> None:
            c = share_consumer(bs, group, topic=topic)
            c.set_acknowledgement_commit_callback(lambda offsets, exc: heard.append((offsets, exc)))
            try:
                got: list[ck.Message] = []
                deadline = time.monotonic() + TIMEOUT
                while len(got) < 10 or acked() < set(range(10)):
                    assert time.monotonic() < deadline, f"{len(got)} records, {sorted(acked())} acknowledged"
                    batch = [m for m in c.poll(0.5) if m.error() is None]
                    for m in batch:
                        c.acknowledge(m)
                    got += batch
                produce_sync(bs, [b"last"], topic)
                for m in poll_until(c, lambda s: b"last" in values(s)):
                    c.acknowledge(m)
            finally:
                c.close()  # carries the last acknowledgement

        await asyncio.to_thread(run)
        return sorted(acked()), [str(exc) for _, exc in heard if exc is not None]

    await same_on_both(share_gateway, kafka_broker, scenario)


async def test_fetch_max_bytes_zero_as_on_kafka(share_gateway, kafka_broker) -> None:
    """A consumer with fetch.max.bytes=0 polls nothing; ShareFetch with MaxBytes 0 on the wire (its
    partition's error and message, what it acquired); another consumer then gets every record on its
    first delivery."""
    topic, group = unique("fmb0"), unique("fmb0")

    async def scenario(bs: str) -> object:
        await share_topic(bs, topic, 1, group)
        await asyncio.to_thread(produce_sync, bs, [b"r%d" % i for i in range(10)], topic)

        def starved() -> list[bytes]:
            c = share_consumer(bs, group, topic=topic, **{"fetch.max.bytes": 0})
            try:
                return values([m for _ in range(5) for m in c.poll(1.0)])
            finally:
                c.close()

        polled = await asyncio.to_thread(starved)
        tid = await asyncio.to_thread(topic_id, bs, topic)
        member = str(uuid.uuid4())
        joined = await wire(bs, ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
            "group_id": group, "member_id": member, "member_epoch": 0, "subscribed_topic_names": [topic]})
        r = await wire(bs, ApiKey.SHARE_FETCH, 1, {
            "group_id": group, "member_id": member, "share_session_epoch": 0, "max_wait": 5000, "min_bytes": 1,
            "max_bytes": 0, "max_records": 100, "batch_size": 100, "forgotten_topics_data": [],
            "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]})
        on_wire = (int(joined.error_code), int(r.error_code), [
            (p.partition_index, int(p.error_code), p.error_message, list(p.acquired_records))
            for t in r.responses for p in t.partitions])
        got = [m for b in await asyncio.to_thread(polls, bs, group, topic, 10) for m in b]
        return polled, on_wire, sorted(offset(m) for m in got), sorted({count(m) for m in got})

    await same_on_both(share_gateway, kafka_broker, scenario)


def topic_id(bs: str, topic: str) -> uuid.UUID:
    admin = AdminClient({"bootstrap.servers": bs})  # kept until the answer comes
    [described] = admin.describe_topics(ck.TopicCollection([topic])).values()
    tid = described.result(timeout=TIMEOUT).topic_id
    bits = 2**64 - 1
    return uuid.UUID(int=(tid.get_most_significant_bits() & bits) << 64 | tid.get_least_significant_bits() & bits)


async def test_a_topic_created_again_under_a_live_share_group_as_on_kafka(share_gateway, kafka_broker) -> None:
    """A share consumer reads a topic that is then deleted and created again (fewer partitions)
    while it goes on polling: which records of the new topic it gets, and their delivery counts."""
    topic, group = unique("reborn"), unique("reborn")

    async def scenario(bs: str) -> object:
        await share_topic(bs, topic, 3, group)
        await asyncio.to_thread(produce_sync, bs, [b"r%d" % i for i in range(30)], topic)
        c = share_consumer(bs, group, topic=topic, **{"topic.metadata.refresh.interval.ms": "500"})
        got: list[ck.Message] = []
        try:
            await asyncio.to_thread(poll_values, c, got, {b"r%d" % i for i in range(30)})
            old = sorted(values(got))
            admin = AdminClient({"bootstrap.servers": bs})
            for f in admin.delete_topics([topic]).values():
                await asyncio.to_thread(f.result, TIMEOUT)
            await asyncio.to_thread(create_topics, bs, (topic, 2, {}))
            del got[:]
            await asyncio.to_thread(produce_sync, bs, [b"new%d" % i for i in range(10)], topic)
            await asyncio.to_thread(poll_values, c, got, {b"new%d" % i for i in range(10)})
        finally:
            await asyncio.to_thread(c.close)
        return old, sorted(values(got)), sorted({count(m) for m in got})

    await same_on_both(share_gateway, kafka_broker, scenario)


async def test_every_first_delivery_reaches_a_share_consumer_as_on_kafka(share_gateway, kafka_broker) -> None:
    """Four share consumers join one after another and drain 3,000 records of three partitions,
    accepting each: how many deliveries, of how many records, and which were not first deliveries."""
    topic, group, n = unique("first"), unique("first"), 3000

    async def scenario(bs: str) -> object:
        await share_topic(bs, topic, 3, group)
        await fill(bs, n, topic=topic)
        delivered: list[tuple[int, int, int]] = []  # partition, offset, delivery count
        lock = threading.Lock()

        def drained() -> bool:
            with lock:
                return len({d[:2] for d in delivered}) >= n

        def member(joined: threading.Event, previous: threading.Event | None) -> None:
            if previous is not None:
                previous.wait(TIMEOUT)  # joins one after another: each one moves the assignment
            c = share_consumer(bs, group, topic=topic)
            try:
                deadline = time.monotonic() + TIMEOUT * 2
                while not drained() and time.monotonic() < deadline:
                    batch = [m for m in c.poll(0.2) if m.error() is None]
                    joined.set()
                    for m in batch:
                        c.acknowledge(m)
                    with lock:
                        delivered.extend((m.partition() or 0, offset(m), count(m)) for m in batch)
            finally:
                joined.set()
                c.close()

        events = [threading.Event() for _ in range(4)]
        await asyncio.gather(*(asyncio.to_thread(member, e, events[i - 1] if i else None)
                               for i, e in enumerate(events)))
        return len(delivered), len({d[:2] for d in delivered}), [d for d in delivered if d[2] != 1]

    await same_on_both(share_gateway, kafka_broker, scenario)


LOCK_KEYS = ["share.record.lock.duration.ms", "share.auto.offset.reset", "share.delivery.count.limit"]


async def test_a_groups_record_lock_duration_as_on_kafka(share_gateway, kafka_broker) -> None:
    """share.record.lock.duration.ms set on the group (1 s): DescribeConfigs of the group, then a
    consumer that takes records and never acknowledges them, and another consumer that gets them
    once their locks expire, with their delivery counts."""
    topic, group = unique("locks"), unique("locks")

    async def scenario(bs: str) -> object:
        await share_topic(bs, topic, 1, group, share_record_lock_duration_ms=str(LOCK_MS))
        resp = await wire(bs, ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": RESOURCE_GROUP, "resource_name": group, "configuration_keys": LOCK_KEYS}],
            "include_synonyms": True, "include_documentation": False})
        described = [(int(r.error_code), r.error_message, sorted(
            (c.name, c.value, c.read_only, int(c.config_source), int(c.config_type),
             [(s.name, s.value, int(s.source)) for s in c.synonyms]) for c in r.configs)) for r in resp.results]
        await fill(bs, 20, topic=topic)

        held, taken = await asyncio.to_thread(held_then_taken, bs, group, topic)
        first: dict[int, int] = {}  # each record's count when the second consumer first got it
        for m in taken:
            first.setdefault(offset(m), count(m))
        return described, sorted({count(m) for m in held}), sorted({first[offset(m)] for m in held})

    await same_on_both(share_gateway, kafka_broker, scenario)
