"""Share groups (KIP-932) with confluent-kafka's ShareConsumer, and with native shared consumers on
the same queue: records split among consumers with none lost and none accepted twice, RELEASE and
lock expiry redelivering with a higher delivery count, REJECT and the delivery limit archiving,
share.auto.offset.reset, both isolation levels over aborted and open transactions, and a gateway killed with
records locked losing no acknowledgement."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import confluent_kafka as ck
import pytest
from confluent_kafka import AcknowledgeType
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kio.schema.errors import ErrorCode as KafkaError

from gateway.client import Client
from gateway.config import Config, ConfigError
from gateway.domain.groups.share_coordinator import ShareCoordinator
from gateway.domain.services import Services
from gateway.domain.subscriptions import Delivery
from gateway.kafka import codec
from gateway.kafka.dispatch import ApiKey
from gateway.kafka.share import SharePartition, encode_share_fetch_response
from gateway.server.gateway import Gateway
from gateway.store import keys
from gateway.store.connection import connect
from tests import conftest
from tests.conftest import (
    GatewayProcess,
    admin_url,
    eventually,
    kafka_bootstrap,
    native_url,
    running_gateway,
    test_config,
)
from tests.kafka_clients import produce
from tests.kafka_wire import call

pytestmark = pytest.mark.kafka
Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]
T = TypeVar("T")

TOPIC = "jobs"
LOCK_MS = 1000  # the least Kafka allows (group.share.min.record.lock.duration.ms), as librdkafka's CI sets it
TIMEOUT = 30.0
SETTINGS = {"group_share_min_record_lock_duration_ms": LOCK_MS, "group_consumer_heartbeat_interval_ms": 250,
            "group_consumer_session_timeout_ms": 5000}


@pytest.fixture
async def gw(redis_url: str) -> AsyncIterator[Gateway]:
    """A gateway whose share groups may lock records for as little as LOCK_MS."""
    async with running_gateway(test_config(redis_url, **SETTINGS)) as g:
        yield g


async def group_configs(bs: str, group: str, **configs: str) -> None:
    """IncrementalAlterConfigs SET on the GROUP resource (names with dots given with underscores)."""
    admin = AdminClient({"bootstrap.servers": bs})
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    (f,) = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)]).values()
    await asyncio.to_thread(f.result, TIMEOUT)

    def described() -> dict[str, str | None]:
        (d,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()
        return {name: entry.value for name, entry in d.result(TIMEOUT).items()}

    # A Kafka broker applies a group's configs once the controller's record reaches its metadata
    # cache, a moment after the alteration is answered: what a user then reads is the new value.
    wanted = {e.name: e.value for e in entries}

    async def applied() -> bool:
        return {k: v for k, v in (await asyncio.to_thread(described)).items() if k in wanted} == wanted

    await eventually(applied, TIMEOUT, f"group {group}'s configs read back as {wanted}")


async def fill(bs: str, n: int, start: int = 0, topic: str = TOPIC) -> None:
    """`n` records "r<i>", in many small batches so that consumers can share them."""
    await produce("confluent", bs, topic, [(None, b"r%d" % i) for i in range(start, start + n)],
                  **{"linger.ms": 0, "batch.num.messages": 25})


def share_consumer(bs: str, group: str, explicit: bool = True, topic: str = TOPIC, **conf: object) -> ck.ShareConsumer:
    c = ck.ShareConsumer({"bootstrap.servers": bs, "group.id": group,
                          "share.acknowledgement.mode": "explicit" if explicit else "implicit", **conf})
    c.subscribe([topic])
    return c


def poll_values(c: ck.ShareConsumer, got: list[ck.Message], wanted: set[bytes]) -> None:
    """Poll, accepting each record into `got`, until its values hold `wanted`."""
    deadline = time.monotonic() + TIMEOUT * 2
    while not wanted <= set(values(got)):
        assert time.monotonic() < deadline, f"got {sorted(set(values(got)))}"
        for m in c.poll(0.5):
            if m.error() is None:
                got.append(m)
                c.acknowledge(m)


def held_then_taken(bs: str, group: str, topic: str = TOPIC) -> tuple[list[ck.Message], list[ck.Message]]:
    """One member takes records and sits on them (never acknowledged, never polled again); another
    polls, acknowledging, until it has had every one of them, once their locks ran out."""
    idle, busy = share_consumer(bs, group, topic=topic), share_consumer(bs, group, topic=topic)
    try:
        held = poll_until(idle, lambda s: len(s) >= 1)
        taken = poll_until(busy, lambda s: {offset(m) for m in held} <= {offset(m) for m in s},
                           lambda m: busy.acknowledge(m))
        return held, taken
    finally:
        busy.close()
        idle.close()


def poll_until(c: ck.ShareConsumer, done: Callable[[list[ck.Message]], bool],
               act: Callable[[ck.Message], object] | None = None) -> list[ck.Message]:
    """Poll (acknowledging each record with `act`, committing after each poll) until `done` holds
    for everything polled so far; fails at the deadline."""
    seen: list[ck.Message] = []
    deadline = time.monotonic() + TIMEOUT
    while not done(seen):
        assert time.monotonic() < deadline, f"gave up after {len(seen)} records"
        batch = [m for m in c.poll(0.5) if m.error() is None]
        seen += batch
        if act is not None and batch:
            for m in batch:
                act(m)
            c.commit_sync(TIMEOUT)
    return seen


async def with_consumer(bs: str, group: str, body: Callable[[ck.ShareConsumer], T], explicit: bool = True) -> T:
    """`body` run in a thread with a share consumer of `group`, closed after it."""
    def run() -> T:
        c = share_consumer(bs, group, explicit)
        try:
            return body(c)
        finally:
            c.close()

    return await asyncio.to_thread(run)


def values(msgs: list[ck.Message]) -> list[bytes]:
    return [v for m in msgs if isinstance(v := m.value(), bytes)]


def offset(m: ck.Message) -> int:
    o = m.offset()
    assert o is not None
    return o


def count(m: ck.Message) -> int:
    n = m.delivery_count()
    assert n is not None
    return n


def services(gw: Gateway) -> Services:
    assert gw.services is not None, "the gateway is started"
    return gw.services


@pytest.mark.parametrize("explicit", [True, False], ids=["explicit", "implicit"])
async def test_three_share_consumers_split_a_partition_none_lost_none_twice(gw: Gateway, explicit: bool) -> None:
    """30,000 records of one partition through three share consumers, accepting each record
    (explicitly, or implicitly by the commit after each poll)."""
    bs, n, group = kafka_bootstrap(gw), 30_000, f"split-{explicit}"
    await group_configs(bs, group, share_auto_offset_reset="earliest")
    await fill(bs, n)
    accepted: list[list[int]] = [[], [], []]
    lock = threading.Lock()

    def work(i: int) -> None:
        c = share_consumer(bs, group, explicit)
        try:
            deadline = time.monotonic() + TIMEOUT * 3
            while sum(map(len, accepted)) < n and time.monotonic() < deadline:
                batch = [m for m in c.poll(0.2) if m.error() is None]
                for m in batch if explicit else ():
                    c.acknowledge(m)
                if batch and all(r is None for r in c.commit_sync(TIMEOUT).values()):
                    with lock:
                        accepted[i] += [offset(m) for m in batch]
        finally:
            c.close()

    await asyncio.gather(*(asyncio.to_thread(work, i) for i in range(3)))
    everything = sorted(o for a in accepted for o in a)
    assert everything == list(range(n))  # none lost, none accepted twice
    assert sum(1 for a in accepted if a) >= 2  # the queue was shared


@pytest.mark.parametrize(("topics", "partitions"), [(1, 1), (1, 3), (4, 2)])
async def test_every_record_reaches_a_consumer_on_its_first_delivery(gw: Gateway, topics: int, partitions: int) -> None:
    """Four share consumers join one by one (moving partitions, and with several topics whole
    topics, between them as they come) and drain 10,000 records, accepting each: with no failure,
    every record's first delivery reaches the application (delivery count 1), none is delivered
    twice (librdkafka's 0174 max-concurrency test counts the same)."""
    bs, n, group = kafka_bootstrap(gw), 10_000, f"first-{topics}-{partitions}"
    names = [f"first{topics}-{partitions}-{t}" for t in range(topics)]
    for name in names:
        await services(gw).log.create_topic(name, partitions)
    await group_configs(bs, group, share_auto_offset_reset="earliest")
    for t, name in enumerate(names):
        share = n // topics
        await fill(bs, share, start=t * share, topic=name)
    delivered: list[tuple[str, int, int, int]] = []  # topic, partition, offset, delivery count
    lock = threading.Lock()

    def work(i: int) -> None:
        time.sleep(i * 0.05)  # staggered joins: each one moves the assignment
        c = ck.ShareConsumer({"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit"})
        c.subscribe(names)
        try:
            deadline = time.monotonic() + TIMEOUT * 2
            while time.monotonic() < deadline:
                with lock:
                    if len({d[:3] for d in delivered}) >= n:
                        return
                batch = [m for m in c.poll(0.2) if m.error() is None]
                for m in batch:
                    c.acknowledge(m)
                with lock:
                    delivered.extend((m.topic() or "", m.partition() or 0, offset(m), count(m)) for m in batch)
        finally:
            c.close()

    await asyncio.gather(*(asyncio.to_thread(work, i) for i in range(4)))
    assert len(delivered) == n and len({d[:3] for d in delivered}) == n  # each once
    assert [d for d in delivered if d[3] != 1] == []


async def test_release_redelivers_with_a_higher_delivery_count(gw: Gateway) -> None:
    bs = kafka_bootstrap(gw)
    await group_configs(bs, "rel", share_auto_offset_reset="earliest")
    await fill(bs, 10)

    def run(c: ck.ShareConsumer) -> tuple[list[ck.Message], list[ck.Message]]:
        first = poll_until(c, lambda s: len(s) >= 1, lambda m: c.acknowledge(m, AcknowledgeType.RELEASE))
        again = poll_until(c, lambda s: {offset(m) for m in first} <= {offset(m) for m in s},
                           lambda m: c.acknowledge(m))
        return first, again

    first, again = await with_consumer(bs, "rel", run)
    counts = {offset(m): count(m) for m in again}
    assert all(count(m) == 1 for m in first)
    assert all(counts[offset(m)] == 2 for m in first)


async def test_reject_never_redelivers(gw: Gateway) -> None:
    bs = kafka_bootstrap(gw)
    await group_configs(bs, "rej", share_auto_offset_reset="earliest")
    await fill(bs, 10)

    def run(c: ck.ShareConsumer) -> tuple[list[ck.Message], list[ck.Message]]:
        rejected = poll_until(c, lambda s: len(s) >= 10, lambda m: c.acknowledge(m, AcknowledgeType.REJECT))
        produce_sync(bs, [b"after"])
        return rejected, poll_until(c, lambda s: b"after" in values(s), lambda m: c.acknowledge(m))

    rejected, later = await with_consumer(bs, "rej", run)
    assert sorted(offset(m) for m in rejected) == list(range(10))
    assert values(later) == [b"after"]


async def test_acknowledgements_with_no_new_records_are_answered_applied(gw: Gateway) -> None:
    """Explicit acknowledgements that ride on a ShareFetch finding no new records, and on the
    request that closes the consumer: the acknowledgement commit callback hears every one applied,
    none failed (a partition left out of the answer would be reported INVALID_RECORD_STATE)."""
    bs = kafka_bootstrap(gw)
    await group_configs(bs, "ackonly", share_auto_offset_reset="earliest")
    await fill(bs, 10)
    heard: list[tuple[dict[Any, set[int]], Any]] = []

    def acked() -> set[int]:
        return {o for offsets, _ in heard for os in offsets.values() for o in os}

    def run() -> None:
        c = share_consumer(bs, "ackonly")
        c.set_acknowledgement_commit_callback(lambda offsets, exc: heard.append((offsets, exc)))
        try:
            got: list[ck.Message] = []
            deadline = time.monotonic() + TIMEOUT
            while len(got) < 10 or acked() < set(range(10)):  # the last acknowledgements go with an empty fetch
                assert time.monotonic() < deadline, f"{len(got)} records, {sorted(acked())} acknowledged"
                batch = [m for m in c.poll(0.5) if m.error() is None]
                for m in batch:
                    c.acknowledge(m)
                got += batch
            produce_sync(bs, [b"last"])
            last = poll_until(c, lambda s: b"last" in values(s))
            for m in last:
                c.acknowledge(m)
        finally:
            c.close()  # carries the last acknowledgement

    await asyncio.to_thread(run)
    assert [exc for _, exc in heard if exc is not None] == []
    assert acked() == set(range(11))


async def one_per_batch(gw: Gateway, topic: str, n: int, partitions: int = 1) -> None:
    """`n` records "b<i>", each in a stored batch of its own, spread over the topic's partitions."""
    await services(gw).log.create_topic(topic, partitions)
    await produce("confluent", kafka_bootstrap(gw), topic, [(b"k%d" % i, b"b%d" % i) for i in range(n)],
                  **{"linger.ms": 0, "batch.num.messages": 1})


def polls(bs: str, group: str, topic: str, n: int, **conf: object) -> list[list[ck.Message]]:
    """The non-empty polls of a consumer with `conf` (accepting each record) until `n` records came."""
    c = ck.ShareConsumer({"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit",
                          **conf})
    c.subscribe([topic])
    out: list[list[ck.Message]] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while sum(map(len, out)) < n:
            assert time.monotonic() < deadline, f"{sum(map(len, out))} records"
            batch = [m for m in c.poll(0.5) if m.error() is None]
            for m in batch:
                c.acknowledge(m)
            if batch:
                out.append(batch)
    finally:
        c.close()
    return out


@pytest.mark.parametrize("partitions", [1, 2])
async def test_fetch_max_bytes_is_a_soft_limit_of_one_batch(gw: Gateway, partitions: int) -> None:
    """fetch.max.bytes=1: every ShareFetch answer holds one stored batch (the first batch always
    goes, KIP-74), of one partition however many the consumer fetches; the default limit lets
    many go at once."""
    bs, topic = kafka_bootstrap(gw), f"fmb{partitions}"
    await one_per_batch(gw, topic, 10, partitions)
    await group_configs(bs, f"fmb-one-{partitions}", share_auto_offset_reset="earliest")
    await group_configs(bs, f"fmb-default-{partitions}", share_auto_offset_reset="earliest")
    one = await asyncio.to_thread(polls, bs, f"fmb-one-{partitions}", topic, 10, **{"fetch.max.bytes": 1})
    assert [len(b) for b in one] == [1] * 10
    default = await asyncio.to_thread(polls, bs, f"fmb-default-{partitions}", topic, 10)
    assert len(default) < 10 and sorted(values([m for b in default for m in b])) == sorted(values([m for b in one for m in b]))


async def test_fetch_max_bytes_zero_fetches_nothing(gw: Gateway) -> None:
    """MaxBytes=0 is answered at once with no partitions and no error, acquiring nothing, as Kafka
    4.4 answers it (tests/test_kafka_oracle_28.py compares): a consumer with fetch.max.bytes=0 polls
    no records and no error, and another consumer of the group then gets every record on its first
    delivery."""
    bs, topic = kafka_bootstrap(gw), "fmb0"
    await one_per_batch(gw, topic, 10)
    await group_configs(bs, "fmb0", share_auto_offset_reset="earliest")

    def starved() -> list[ck.Message]:
        c = ck.ShareConsumer({"bootstrap.servers": bs, "group.id": "fmb0", "fetch.max.bytes": 0})
        c.subscribe([topic])
        try:
            return [m for _ in range(5) for m in c.poll(1.0)]
        finally:
            c.close()

    assert await asyncio.to_thread(starved) == []
    tid = uuid.UUID(hex=(await services(gw).log.topic(topic)).topic_id)
    async with wire(gw) as conn:
        r = await call(conn, ApiKey.SHARE_FETCH, 1, {
            "group_id": "fmb0", "member_id": "m0", "share_session_epoch": 0, "max_wait": 5000, "min_bytes": 1,
            "max_bytes": 0, "max_records": 100, "batch_size": 100, "forgotten_topics_data": [],
            "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]})
        assert (r.error_code, r.responses) == (KafkaError.none, ())
    got = [m for b in await asyncio.to_thread(polls, bs, "fmb0", topic, 10) for m in b]
    assert sorted(offset(m) for m in got) == list(range(10)) and all(count(m) == 1 for m in got)


async def test_max_records_and_batch_size(gw: Gateway) -> None:
    """max.poll.records=5 over ten one-record batches: no answer holds more than five records. On
    the wire, BatchSize shapes the acquired ranges as Kafka's SharePartition.createBatches does:
    joined across stored batches, a new one begun at a batch boundary once BatchSize is reached."""
    bs, topic = kafka_bootstrap(gw), "mr"
    await one_per_batch(gw, topic, 20)
    await group_configs(bs, "mr", share_auto_offset_reset="earliest")
    await group_configs(bs, "bs", share_auto_offset_reset="earliest")
    capped = await asyncio.to_thread(polls, bs, "mr", topic, 20, **{"max.poll.records": 5})
    assert max(len(b) for b in capped) <= 5 and len(capped) >= 4
    tid = uuid.UUID(hex=(await services(gw).log.topic(topic)).topic_id)
    async with wire(gw) as conn:
        async def fetch(epoch: int, max_records: int, batch_size: int) -> list[tuple[int, int, int]]:
            r = await call(conn, ApiKey.SHARE_FETCH, 1, {
                "group_id": "bs", "member_id": "m0", "share_session_epoch": epoch, "max_wait": 5000, "min_bytes": 1,
                "max_bytes": 1 << 20, "max_records": max_records, "batch_size": batch_size,
                "forgotten_topics_data": [],
                "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]})
            return [(a.first_offset, a.last_offset, a.delivery_count)
                    for t in r.responses for p in t.partitions for a in p.acquired_records]

        first = await fetch(0, 10, 3)
        assert first == [(0, 2, 1), (3, 5, 1), (6, 8, 1), (9, 9, 1)]
        assert await fetch(1, 10, 100) == [(10, 19, 1)]


def produce_sync(bs: str, vals: list[bytes], topic: str = TOPIC) -> None:
    p = ck.Producer({"bootstrap.servers": bs})
    for v in vals:
        p.produce(topic, v)
    assert p.flush(TIMEOUT) == 0


async def test_a_consumer_that_stops_polling_loses_its_locks(gw: Gateway) -> None:
    bs = kafka_bootstrap(gw)
    await group_configs(bs, "locks", share_auto_offset_reset="earliest", share_record_lock_duration_ms=str(LOCK_MS))
    await fill(bs, 20)

    held, taken = await asyncio.to_thread(held_then_taken, bs, "locks")
    counts = {offset(m): count(m) for m in taken}
    assert all(counts[offset(m)] >= 2 for m in held)


async def test_the_delivery_limit_archives(gw: Gateway) -> None:
    bs = kafka_bootstrap(gw)
    await group_configs(bs, "limit", share_auto_offset_reset="earliest", share_delivery_count_limit="2")
    await fill(bs, 5)

    def run(c: ck.ShareConsumer) -> list[ck.Message]:
        # the first batch, released twice: its second delivery is its last
        first = poll_until(c, lambda s: len(s) >= 1, lambda m: c.acknowledge(m, AcknowledgeType.RELEASE))
        offsets = {offset(m) for m in first}
        seen = poll_until(c, lambda s: offsets <= {offset(m) for m in s if count(m) == 2},
                          lambda m: c.acknowledge(m, AcknowledgeType.RELEASE if offset(m) in offsets
                                                  else AcknowledgeType.ACCEPT))
        produce_sync(bs, [b"after"])
        return seen + poll_until(c, lambda s: b"after" in values(s), lambda m: c.acknowledge(m))

    seen = await with_consumer(bs, "limit", run)
    assert max(count(m) for m in seen) == 2
    assert services(gw).share.stats["limit"].archived >= 1


async def test_auto_offset_reset_latest_and_earliest(gw: Gateway) -> None:
    bs = kafka_bootstrap(gw)
    await fill(bs, 5)
    await group_configs(bs, "early", share_auto_offset_reset="earliest")

    first = await with_consumer(bs, "early", lambda c: values(poll_until(c, lambda s: len(s) >= 1))[0], False)
    assert first == b"r0"
    # "late" (latest, Kafka's default) starts at the end: the record after its subscription is its first
    stop = threading.Event()
    got: list[bytes] = []

    def late() -> None:
        c = share_consumer(bs, "late", explicit=False)
        try:
            got.extend(values(poll_until(c, lambda s: len(s) >= 1 or stop.is_set())))
        finally:
            c.close()

    thread = asyncio.create_task(asyncio.to_thread(late))
    subs = services(gw).subscriptions.store
    await conftest.eventually(lambda: _has_sub(subs, "late"), timeout=TIMEOUT, what="the late group's subscription")
    await produce("confluent", bs, TOPIC, [(None, b"fresh")])
    await thread
    assert got == [b"fresh"]


@pytest.mark.parametrize("reset", ["earliest", "latest"])
async def test_a_topic_created_again_under_a_live_share_group_is_read_afresh(gw: Gateway, reset: str) -> None:
    """A share consumer reads a 3-partition topic, which is then deleted and created again with 2
    partitions while the consumer goes on polling: the new topic (a new topic id) is read from
    share.auto.offset.reset, as Kafka keys share-partition state by topic id, so its records are
    all delivered, first deliveries, none of the old topic's; with `latest`, from where the new
    topic stood when the group first read it."""
    bs, topic, group = kafka_bootstrap(gw), f"reborn-{reset}", f"reborn-{reset}"
    admin = AdminClient({"bootstrap.servers": bs})

    async def create(partitions: int) -> None:
        (f,) = admin.create_topics([NewTopic(topic, partitions)]).values()
        await asyncio.to_thread(f.result, TIMEOUT)

    await create(3)
    await group_configs(bs, group, share_auto_offset_reset=reset)
    c = ck.ShareConsumer({"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit",
                          "topic.metadata.refresh.interval.ms": "500"})
    c.subscribe([topic])
    got: list[ck.Message] = []

    try:
        if reset == "latest":  # the group reads the old topic before anything is written to it
            old_id = (await services(gw).log.topic(topic)).topic_id
            reading = asyncio.create_task(asyncio.to_thread(poll_values, c, got, {b"r%d" % i for i in range(30)}))
            await eventually(lambda: _reads(services(gw), topic, group, old_id), what="the group reads the topic")
            await fill(bs, 30, topic=topic)
            await reading
        else:
            await fill(bs, 30, topic=topic)
            await asyncio.to_thread(poll_values, c, got, {b"r%d" % i for i in range(30)})
        (f,) = admin.delete_topics([topic]).values()
        await asyncio.to_thread(f.result, TIMEOUT)
        await create(2)
        del got[:]
        if reset == "latest":
            # the consumer polls until the group reads the new topic, then records are written to it
            waiting = asyncio.create_task(asyncio.to_thread(poll_values, c, got, {b"new%d" % i for i in range(10)}))
            new_id = (await services(gw).log.topic(topic)).topic_id
            await eventually(lambda: _reads(services(gw), topic, group, new_id), what="the group reads the new topic")
            await produce("confluent", bs, topic, [(None, b"new%d" % i) for i in range(10)])
            await waiting
        else:
            await produce("confluent", bs, topic, [(None, b"new%d" % i) for i in range(10)])
            await asyncio.to_thread(poll_values, c, got, {b"new%d" % i for i in range(10)})
    finally:
        await asyncio.to_thread(c.close)
    assert sorted(values(got)) == sorted(b"new%d" % i for i in range(10))
    assert all(count(m) == 1 for m in got)


async def _reads(s: Services, topic: str, group: str, topic_id: str) -> bool:
    """Whether the group's subscription on this gateway reads the incarnation of `topic_id`."""
    sub = s.subscriptions._subs.get((topic, group))
    return sub is not None and sub.topic_id == topic_id and not sub.deleted and bool(sub.cursor)


async def test_auto_offset_reset_by_duration(gw: Gateway) -> None:
    """by_duration:PT10M starts at the first record written in the last ten minutes."""
    bs = kafka_bootstrap(gw)
    now = int(time.time() * 1000)

    def write() -> None:
        p = ck.Producer({"bootstrap.servers": bs, "linger.ms": 0})
        for v, ts in ((b"hour-old", now - 3_600_000), (b"twenty-min-old", now - 1_200_000), (b"fresh1", now),
                      (b"fresh2", now)):
            p.produce(TOPIC, v, timestamp=ts)
            assert p.flush(TIMEOUT) == 0  # a batch each: the search is per batch

    await asyncio.to_thread(write)
    await group_configs(bs, "recent", share_auto_offset_reset="by_duration:PT10M")
    got = await with_consumer(bs, "recent", lambda c: values(poll_until(c, lambda s: b"fresh2" in values(s))), False)
    assert got == [b"fresh1", b"fresh2"]


async def _has_sub(subs: object, name: str) -> bool:
    from gateway.store.subscriptions import SubscriptionStore

    assert isinstance(subs, SubscriptionStore)
    return name in await subs.positions(TOPIC, range(1))


async def test_isolation_levels_over_aborted_and_open_transactions(gw: Gateway) -> None:
    """read_uncommitted (Kafka's default) delivers the records of aborted and open transactions up to
    the high watermark; read_committed hides aborted ones and stops at the open one, as Fetch does."""
    bs = kafka_bootstrap(gw)
    await group_configs(bs, "dirty", share_auto_offset_reset="earliest")
    await group_configs(bs, "clean", share_auto_offset_reset="earliest", share_isolation_level="read_committed")
    p = ck.Producer({"bootstrap.servers": bs, "transactional.id": "share-t"})

    def write() -> None:
        p.init_transactions(TIMEOUT)
        for vals, end in (([b"no1", b"no2"], p.abort_transaction), ([b"yes1", b"yes2"], p.commit_transaction)):
            p.begin_transaction()
            for v in vals:
                p.produce(TOPIC, v)
            assert p.flush(TIMEOUT) == 0  # written, then aborted or committed
            end(TIMEOUT)
        p.begin_transaction()  # left open
        p.produce(TOPIC, b"open1")
        assert p.flush(TIMEOUT) == 0
        produce_sync(bs, [b"plain"])

    await asyncio.to_thread(write)
    dirty = await with_consumer(bs, "dirty", lambda c: poll_until(c, lambda s: b"plain" in values(s)), False)
    assert values(dirty) == [b"no1", b"no2", b"yes1", b"yes2", b"open1", b"plain"]
    c = share_consumer(bs, "clean")
    try:
        clean = await asyncio.to_thread(poll_until, c, lambda s: b"yes2" in values(s), c.acknowledge)
        assert values(clean) == [b"yes1", b"yes2"]
        open_at = offset(next(m for m in dirty if m.value() == b"open1"))
        share = services(gw).share
        await conftest.eventually(lambda: _start_offset(share, "clean", open_at), timeout=TIMEOUT,
                                  what="the committed group waiting at the open transaction")
        await asyncio.to_thread(p.abort_transaction, TIMEOUT)
        await asyncio.to_thread(produce_sync, bs, [b"last"])
        clean += await asyncio.to_thread(poll_until, c, lambda s: b"last" in values(s), c.acknowledge)
    finally:
        await asyncio.to_thread(c.close)
    assert values(clean) == [b"yes1", b"yes2", b"plain", b"last"]


async def _start_offset(share: ShareCoordinator, group: str, expected: int) -> bool:
    return bool((await share.start_offsets(group, {TOPIC: [0]}))[TOPIC][0] == expected)


async def test_kafka_and_native_consumers_share_one_queue(gw: Gateway) -> None:
    bs, n = kafka_bootstrap(gw), 300
    await group_configs(bs, "both", share_auto_offset_reset="earliest")
    await fill(bs, n)
    native_got: list[int] = []
    kafka_got: list[int] = []
    client = await Client.connect(native_url(gw))
    try:
        consumer = await client.subscribe(TOPIC, "both", mode="shared", initial_position="earliest",
                                          receiver_queue_size=25)
        first = await consumer.receive(timeout=TIMEOUT)  # the native side holds a batch before Kafka's joins
        await consumer.acknowledge(first)
        native_got.append(first.message_id.offset)

        def kafka_assigned() -> bool:
            group = services(gw).share.groups.get("both")
            return group is not None and any(m.assignment for m in group.members.values())

        async def native() -> None:
            # the Kafka consumer gets its partition a heartbeat after joining, once the group's share
            # state is initialized: the native side waits for it rather than take every record first
            await eventually(kafka_assigned, TIMEOUT, "the Kafka consumer's assignment")
            while len(native_got) + len(kafka_got) < n:
                try:
                    msg = await consumer.receive(timeout=0.2)
                except TimeoutError:
                    continue
                await consumer.acknowledge(msg)
                native_got.append(msg.message_id.offset)

        def kafka() -> None:
            c = share_consumer(bs, "both")
            try:
                deadline = time.monotonic() + TIMEOUT
                while len(native_got) + len(kafka_got) < n and time.monotonic() < deadline:
                    batch = [m for m in c.poll(0.2) if m.error() is None]
                    for m in batch:
                        c.acknowledge(m)
                    if batch and all(r is None for r in c.commit_sync(TIMEOUT).values()):
                        kafka_got.extend(offset(m) for m in batch)
            finally:
                c.close()

        await asyncio.wait_for(asyncio.gather(native(), asyncio.to_thread(kafka)), TIMEOUT)
    finally:
        await client.close()
    assert sorted(native_got + kafka_got) == list(range(n))
    assert native_got and kafka_got


def test_a_killed_gateway_loses_no_acknowledgement(gateway_process: GatewayProcess) -> None:
    """Records accepted before the kill never come back; those locked at the kill are delivered again."""
    gp = gateway_process
    gp.args = ["--group-share-min-record-lock-duration-ms", str(LOCK_MS),
               "--group-consumer-heartbeat-interval-ms", "250"]
    gp.start()
    bs, n = gp.kafka_bootstrap, 200
    asyncio.run(group_configs(bs, "crash", share_auto_offset_reset="earliest"))
    asyncio.run(fill(bs, n))
    accepted: set[int] = set()
    after: set[int] = set()
    c = share_consumer(bs, "crash")

    def step(into: set[int]) -> set[int]:
        """One poll, every record accepted; the offsets polled (`into` gets those the gateway confirmed)."""
        try:
            batch = [m for m in c.poll(0.2) if m.error() is None]
        except ck.KafkaException:
            return set()
        for m in batch:
            c.acknowledge(m)
        polled = {offset(m) for m in batch}
        if batch and all(r is None for r in c.commit_sync(TIMEOUT).values()):
            into.update(polled)
        return polled

    try:
        deadline = time.monotonic() + TIMEOUT
        while len(accepted) < n:
            assert time.monotonic() < deadline
            step(accepted)
        asyncio.run(fill(bs, n, start=n))
        locked: set[int] = set()
        while not locked:  # acquired, and the gateway dies before their acknowledgement
            assert time.monotonic() < deadline
            batch = [m for m in c.poll(0.2) if m.error() is None]
            for m in batch:
                c.acknowledge(m)
            locked = {offset(m) for m in batch}
        gp.kill()
        gp.start()
        deadline = time.monotonic() + 2 * TIMEOUT
        while not locked <= after or len(accepted | after) < 2 * n:
            assert time.monotonic() < deadline, f"{len(accepted)} + {len(after)} of {2 * n}"
            after |= step(set())
    finally:
        c.close()
    assert not accepted & after  # what was accepted before the kill never came back
    assert accepted | after == set(range(2 * n))


def test_delivery_counts_survive_a_killed_gateway(gateway_process: GatewayProcess) -> None:
    """A record's delivery count is kept in Redis: locked when the gateway dies, it comes back from
    the next one with its count, and once delivered share.delivery.count.limit times it is archived
    however many gateways died holding it."""
    gp = gateway_process
    gp.args = ["--group-share-min-record-lock-duration-ms", str(LOCK_MS)]
    gp.start()
    bs = gp.kafka_bootstrap
    asyncio.run(group_configs(bs, "counted", share_auto_offset_reset="earliest", share_delivery_count_limit="2"))
    asyncio.run(produce("confluent", bs, TOPIC, [(None, b"once")]))

    async def acquire(member: str) -> list[tuple[int, int, int]]:
        """(first, last, delivery count) of what one member's share fetches acquire first."""
        host, port = bs.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            conn = (reader, writer)
            joined = await join(conn, "counted", member)
            tid = joined.assignment.topic_partitions[0].topic_id
            deadline = time.monotonic() + TIMEOUT
            while True:
                assert time.monotonic() < deadline
                r = await share_fetch(conn, "counted", member, 0, tid)
                acquired = r.responses[0].partitions[0].acquired_records if r.responses else []
                if acquired:
                    return [(a.first_offset, a.last_offset, a.delivery_count) for a in acquired]
                await call(conn, ApiKey.SHARE_FETCH, 1, {  # close the empty session, to open it again
                    "group_id": "counted", "member_id": member, "share_session_epoch": -1, "max_wait": 0,
                    "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 1, "batch_size": 1, "topics": [],
                    "forgotten_topics_data": []})
        finally:
            writer.close()

    assert asyncio.run(acquire("m1")) == [(0, 0, 1)]
    gp.kill()  # with offset 0 locked, never acknowledged
    gp.start()
    assert asyncio.run(acquire("m2")) == [(0, 0, 2)]  # its second delivery, by another gateway
    gp.kill()
    gp.start()
    asyncio.run(produce("confluent", bs, TOPIC, [(None, b"after")]))
    assert asyncio.run(acquire("m3")) == [(1, 1, 1)]  # offset 0 was archived at the limit


# -- on the wire: sessions, record states, describe, configs, offsets, listings -----------------


@contextlib.asynccontextmanager
async def wire(gw: Gateway) -> AsyncIterator[Conn]:
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
    try:
        yield reader, writer
    finally:
        writer.close()


async def join(conn: Conn, group: str, member: str) -> Any:
    """Join, then heartbeat again for the partitions: as Kafka, a share group is assigned a topic's
    partitions once their share state is initialized, after the heartbeat that subscribed them."""
    r = await call(conn, ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
        "group_id": group, "member_id": member, "member_epoch": 0, "subscribed_topic_names": [TOPIC]})
    assert r.error_code == KafkaError.none, r
    r = await call(conn, ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
        "group_id": group, "member_id": member, "member_epoch": r.member_epoch})
    assert r.error_code == KafkaError.none, r
    return r


async def share_fetch(conn: Conn, group: str, member: str, epoch: int, tid: uuid.UUID | None,
                      acks: list[dict[str, Any]] | None = None) -> Any:
    return await call(conn, ApiKey.SHARE_FETCH, 1, {
        "group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait": 2000, "min_bytes": 1,
        "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100,
        "topics": [] if tid is None else [{"topic_id": tid, "partitions": [
            {"partition_index": 0, "acknowledgement_batches": acks or []}]}],
        "forgotten_topics_data": []})


async def test_a_silent_fetchers_share_session_is_closed(redis_url: str) -> None:
    """A member that fetches here but never heartbeats here (its group coordinated by another
    gateway) and then falls silent: after the session timeout its share session is gone and what it
    held is back in the queue, well before its records' locks would expire."""
    cfg = test_config(redis_url, **{**SETTINGS, "group_consumer_session_timeout_ms": 1000})
    async with running_gateway(cfg) as g:
        bs = kafka_bootstrap(g)
        await group_configs(bs, "ghost", share_auto_offset_reset="earliest")
        await fill(bs, 10)
        tid = uuid.UUID(hex=(await services(g).log.topic(TOPIC)).topic_id)

        async def in_flight() -> dict[int, int]:
            view = await services(g).share.view("ghost")
            assert view is not None
            return view.in_flight.get(TOPIC, {}).get(0, {})

        async with wire(g) as conn:
            got = await share_fetch(conn, "ghost", "m1", 0, tid)
            assert got.responses[0].partitions[0].acquired_records
            assert await in_flight()
            await eventually(lambda: _empty(in_flight()), what="the silent member's records released")
            again = await share_fetch(conn, "ghost", "m1", 1, tid)
            assert again.error_code == KafkaError.share_session_not_found


async def _empty(held: Awaitable[dict[int, int]]) -> bool:
    return not await held


async def test_renew_extends_a_records_lock(gw: Gateway) -> None:
    """KIP-1222's RENEW (ShareAcknowledge v2, acknowledge type 4): m1 renews the records it holds
    while m2 long-polls for twice their lock duration, which gets m2 nothing; once m1 stops renewing,
    the locks expire and m2 gets the records, delivered a second time."""
    bs = kafka_bootstrap(gw)
    await group_configs(bs, "renew", share_auto_offset_reset="earliest", share_record_lock_duration_ms="1000")
    await fill(bs, 5)
    tid = uuid.UUID(hex=(await services(gw).log.topic(TOPIC)).topic_id)

    def fetch(member: str, epoch: int, wait_ms: int) -> dict[str, Any]:
        return {"group_id": "renew", "member_id": member, "share_session_epoch": epoch, "max_wait": wait_ms,
                "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100,
                "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}],
                "forgotten_topics_data": []}

    def acquired(r: Any) -> list[tuple[int, int, int]]:
        return [(a.first_offset, a.last_offset, a.delivery_count)
                for t in r.responses for p in t.partitions for a in p.acquired_records]

    async with wire(gw) as c1, wire(gw) as c2:
        await join(c1, "renew", "m1")
        await join(c2, "renew", "m2")
        held = acquired(await call(c1, ApiKey.SHARE_FETCH, 2, fetch("m1", 0, 2000)))
        assert held and held[0][0] == 0 and held[-1][1] == 4
        waiting = asyncio.ensure_future(call(c2, ApiKey.SHARE_FETCH, 2, fetch("m2", 0, 2000)))
        epoch = 1
        while not waiting.done():  # renewed every quarter of the lock duration, until m2's poll ends
            renewed = await call(c1, ApiKey.SHARE_ACKNOWLEDGE, 2, {
                "group_id": "renew", "member_id": "m1", "share_session_epoch": epoch, "is_renew_ack": True,
                "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": 0, "last_offset": 4, "acknowledge_types": [4]}]}]}]})
            assert renewed.error_code == KafkaError.none
            assert renewed.responses[0].partitions[0].error_code == KafkaError.none
            epoch += 1
            await asyncio.wait([waiting], timeout=0.25)
        assert acquired(await waiting) == []  # two lock durations, and nothing of m1's came to m2
        later = acquired(await call(c2, ApiKey.SHARE_FETCH, 2, fetch("m2", 1, 5000)))
        assert later and all(n == 2 for _, _, n in later)  # m1 stopped renewing: its locks expired


async def test_records_of_a_forgotten_partition_stay_acquired(gw: Gateway) -> None:
    """A share session that forgets a partition (as librdkafka's does when it closes) leaves what
    the member acquired of it acquired: acknowledged afterwards, it is accepted, as in Kafka."""
    bs = kafka_bootstrap(gw)
    await group_configs(bs, "forget", share_auto_offset_reset="earliest")
    await fill(bs, 10)
    tid = uuid.UUID(hex=(await services(gw).log.topic(TOPIC)).topic_id)
    async with wire(gw) as conn:
        await join(conn, "forget", "m1")
        got = await share_fetch(conn, "forget", "m1", 0, tid)
        held = [(a.first_offset, a.last_offset) for a in got.responses[0].partitions[0].acquired_records]
        assert held
        forgot = await call(conn, ApiKey.SHARE_FETCH, 1, {
            "group_id": "forget", "member_id": "m1", "share_session_epoch": 1, "max_wait": 0, "min_bytes": 1,
            "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100, "topics": [],
            "forgotten_topics_data": [{"topic_id": tid, "partitions": [0]}]})
        assert forgot.error_code == KafkaError.none
        acked = await call(conn, ApiKey.SHARE_ACKNOWLEDGE, 1, {
            "group_id": "forget", "member_id": "m1", "share_session_epoch": -1, "topics": [{"topic_id": tid, "partitions": [
                {"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": first, "last_offset": last, "acknowledge_types": [1]} for first, last in held]}]}]})
        assert (acked.error_code, acked.responses[0].partitions[0].error_code) == (KafkaError.none, KafkaError.none)


async def test_records_never_sent_are_first_deliveries_wherever_they_go(gw: Gateway, redis_url: str) -> None:
    """Records the dispatcher read for a member that its response had no room for (MaxBytes 1: one
    stored batch) were never sent: when the partition stops being fetched here (its only fetcher
    forgets it, then every session of the group closes), they are forgotten here, and the next
    member to fetch them gets each as a first delivery (delivery count 1), as on Kafka, where only
    a response's acquisition counts a delivery."""
    bs, group = kafka_bootstrap(gw), "unsent"
    await group_configs(bs, group, share_auto_offset_reset="earliest")
    await fill(bs, 100)
    tid = uuid.UUID(hex=(await services(gw).log.topic(TOPIC)).topic_id)

    def fetch(member: str, epoch: int, max_bytes: int = 1 << 20, forget: bool = False) -> dict[str, Any]:
        return {"group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait": 2000,
                "min_bytes": 1, "max_bytes": max_bytes, "max_records": 100, "batch_size": 100,
                "topics": [] if forget else [{"topic_id": tid, "partitions": [{"partition_index": 0}]}],
                "forgotten_topics_data": [{"topic_id": tid, "partitions": [0]}] if forget else []}

    async def one_batch(conn: Conn, member: str) -> list[tuple[int, int, int]]:
        """The member's first fetch, of one stored batch, accepted; its session closed after."""
        got = await call(conn, ApiKey.SHARE_FETCH, 1, fetch(member, 0, max_bytes=1))
        held = [(a.first_offset, a.last_offset, a.delivery_count)
                for a in got.responses[0].partitions[0].acquired_records]
        assert held and held[-1][1] < 99, got  # the rest of what was read for it is unsent
        acked = await call(conn, ApiKey.SHARE_ACKNOWLEDGE, 1, {
            "group_id": group, "member_id": member, "share_session_epoch": 1, "topics": [
                {"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": f, "last_offset": last, "acknowledge_types": [1]} for f, last, _ in held]}]}]})
        assert acked.responses[0].partitions[0].error_code == KafkaError.none
        return held

    owners, r = keys.subscription_owners(TOPIC, group), connect(redis_url)
    async with wire(gw) as c1, wire(gw) as c2, wire(gw) as c3:
        first = await one_batch(c1, "m1")
        forgot = await call(c1, ApiKey.SHARE_FETCH, 1, fetch("m1", 2, forget=True))
        assert forgot.error_code == KafkaError.none
        await eventually(lambda: _not(r.hexists(owners, "0")), what="the partition no longer dispatched here")
        second = await one_batch(c2, "m2")  # read again here, by m2's fetch
        for conn, member in ((c1, "m1"), (c2, "m2")):  # the group has no session left
            closed = await call(conn, ApiKey.SHARE_ACKNOWLEDGE, 1, {
                "group_id": group, "member_id": member, "share_session_epoch": -1, "topics": []})
            assert closed.error_code == KafkaError.none
        rest: list[tuple[int, int, int]] = []
        epoch = 0
        while not rest or rest[-1][1] < 99:
            got = await call(c3, ApiKey.SHARE_FETCH, 1, fetch("m3", epoch))
            rest += [(a.first_offset, a.last_offset, a.delivery_count)
                     for a in got.responses[0].partitions[0].acquired_records]
            epoch += 1
    await r.aclose()
    ranges = first + second + rest
    assert [f for f, _, _ in ranges] == [0] + [last + 1 for _, last, _ in ranges[:-1]]  # each record once
    assert {n for _, _, n in ranges} == {1}


async def _not(value: Awaitable[object]) -> bool:
    return not await value


async def test_share_group_describe_shows_the_simple_assignors_assignment(gw: Gateway) -> None:
    """Four members on six partitions, then eight: each partition goes to ceil(members / partitions)
    members, and each member within one partition of the others."""
    await services(gw).log.create_topic("wide", 6)
    epochs: dict[str, int] = {}

    async def beat_all(conn: Conn, members: list[str]) -> None:
        for m in members:
            r = await call(conn, ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
                "group_id": "wide", "member_id": m, "member_epoch": epochs.get(m, 0),
                "subscribed_topic_names": ["wide"] if m not in epochs else None})
            assert r.error_code == KafkaError.none, r
            epochs[m] = r.member_epoch

    async def described(conn: Conn) -> dict[str, set[int]]:
        (g,) = (await call(conn, ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": ["wide"]})).groups
        assert g.assignor_name == "simple"
        return {m.member_id: {p for t in m.assignment.topic_partitions for p in t.partitions} for m in g.members}

    def check(assignment: dict[str, set[int]], sharing: int) -> None:
        assert sorted(p for ps in assignment.values() for p in ps) == sorted(list(range(6)) * sharing)
        sizes = [len(ps) for ps in assignment.values()]
        assert max(sizes) - min(sizes) <= 1

    first = [f"m{i}" for i in range(4)]
    async with wire(gw) as conn:
        await beat_all(conn, first)
        await beat_all(conn, first)  # each member hears of the others' joining
        four = await described(conn)
        check(four, 1)
        more = [f"m{i}" for i in range(4, 8)]
        await beat_all(conn, more)
        await beat_all(conn, first + more)
        eight = await described(conn)
        check(eight, 2)


async def test_share_sessions_and_record_states_on_the_wire(gw: Gateway) -> None:
    bs = kafka_bootstrap(gw)
    await group_configs(bs, "w", share_auto_offset_reset="earliest")
    await fill(bs, 10)
    tid = uuid.UUID(hex=(await services(gw).log.topic(TOPIC)).topic_id)
    async with wire(gw) as conn:
        joined = await join(conn, "w", "m1")
        assert [(t.topic_id, list(t.partitions)) for t in joined.assignment.topic_partitions] == [(tid, [0])]
        assert (await share_fetch(conn, "w", "m1", 3, tid)).error_code == KafkaError.share_session_not_found
        got = await share_fetch(conn, "w", "m1", 0, tid)
        (part,) = got.responses[0].partitions
        acquired = [(a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records]
        assert acquired[0][0] == 0 and all(n == 1 for _, _, n in acquired) and part.records
        assert got.acquisition_lock_timeout.total_seconds() == 30
        assert (await share_fetch(conn, "w", "m1", 5, None)).error_code == KafkaError.invalid_share_session_epoch
        first, last = acquired[0][0], acquired[-1][1]
        # an offset not acquired by the member: the partition's acknowledgements are refused whole
        bad = await call(conn, ApiKey.SHARE_ACKNOWLEDGE, 1, {
            "group_id": "w", "member_id": "m1", "share_session_epoch": 1, "topics": [{"topic_id": tid, "partitions": [
                {"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": first, "last_offset": last + 50, "acknowledge_types": [1]}]}]}]})
        assert bad.responses[0].partitions[0].error_code == KafkaError.invalid_record_state
        ok = await call(conn, ApiKey.SHARE_ACKNOWLEDGE, 1, {
            "group_id": "w", "member_id": "m1", "share_session_epoch": 2, "topics": [{"topic_id": tid, "partitions": [
                {"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": first, "last_offset": last, "acknowledge_types": [1]}]}]}]})
        assert ok.error_code == KafkaError.none and ok.responses[0].partitions[0].error_code == KafkaError.none
        described = await call(conn, ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": ["w", "nobody"]})
        w, nobody = described.groups
        assert (w.group_state, [m.member_id for m in w.members]) == ("Stable", ["m1"])
        assert w.members[0].assignment.topic_partitions[0].topic_name == TOPIC
        assert nobody.error_code == KafkaError.group_id_not_found
        offsets = await call(conn, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [{"group_id": "w", "topics": None}]})
        (p,) = offsets.groups[0].topics[0].partitions
        assert (p.start_offset, p.lag) == (last + 1, 10 - last - 1)
        # offsets change only while the group is empty
        busy = await call(conn, ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, {"group_id": "w", "topics": [
            {"topic_name": TOPIC, "partitions": [{"partition_index": 0, "start_offset": 0}]}]})
        assert busy.error_code == KafkaError.non_empty_group
        left = await call(conn, ApiKey.SHARE_GROUP_HEARTBEAT, 1, {"group_id": "w", "member_id": "m1", "member_epoch": -1})
        assert left.member_epoch == -1
        # a consumer group's id is not a share group's
        cg = await call(conn, ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {
            "group_id": "cg", "member_id": "", "member_epoch": 0, "rebalance_timeout": 5000,
            "subscribed_topic_names": [TOPIC], "topic_partitions": []})
        assert cg.error_code == KafkaError.none
        clash = await call(conn, ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
            "group_id": "cg", "member_id": "m1", "member_epoch": 0, "subscribed_topic_names": [TOPIC]})
        assert clash.error_code == KafkaError.group_id_not_found
        # nor is a share group's id a classic or consumer group's (Kafka's classicGroupJoin and
        # getOrMaybeCreateConsumerGroup)
        classic = await call(conn, ApiKey.JOIN_GROUP, 9, {
            "group_id": "w", "session_timeout": 6000, "rebalance_timeout": 6000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
        assert (classic.error_code, classic.member_id) == (KafkaError.inconsistent_group_protocol, "")
        consumer = await call(conn, ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {
            "group_id": "w", "member_id": "", "member_epoch": 0, "rebalance_timeout": 5000,
            "subscribed_topic_names": [TOPIC], "topic_partitions": []})
        assert consumer.error_code == KafkaError.group_id_not_found


async def test_share_group_offsets_listing_and_deletion(gw: Gateway) -> None:
    bs = kafka_bootstrap(gw)
    await group_configs(bs, "adm", share_auto_offset_reset="earliest")
    await fill(bs, 10)

    def consume_all(explicit: bool) -> list[ck.Message]:
        c = share_consumer(bs, "adm", explicit=explicit)
        try:
            return poll_until(c, lambda s: len(s) >= 1 and offset(s[-1]) == 9,
                              (lambda m: c.acknowledge(m)) if explicit else None)
        finally:
            c.close()

    assert [offset(m) for m in await asyncio.to_thread(consume_all, True)] == list(range(10))
    async with wire(gw) as conn:
        async def start() -> dict[int, int]:
            r = await call(conn, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, {"groups": [{"group_id": "adm", "topics": [
                {"topic_name": TOPIC, "partitions": [0]}]}]})
            return {p.partition_index: p.start_offset for t in r.groups[0].topics for p in t.partitions}

        assert await start() == {0: 10}
        listed = await call(conn, ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]})
        assert [(g.group_id, g.group_type, g.protocol_type) for g in listed.groups] == [("adm", "share", "share")]
        altered = await call(conn, ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, {"group_id": "adm", "topics": [
            {"topic_name": TOPIC, "partitions": [{"partition_index": 0, "start_offset": 4}]}]})
        assert altered.error_code == KafkaError.none
        assert await start() == {0: 4}
        again = await asyncio.to_thread(consume_all, False)  # from the altered start, in implicit mode
        assert [offset(m) for m in again] == list(range(4, 10))
        deleted = await call(conn, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": "adm", "topics": [
            {"topic_name": TOPIC}]})
        assert deleted.error_code == KafkaError.none
        assert await start() == {0: -1}
        gone = await call(conn, ApiKey.DELETE_GROUPS, 2, {"groups_names": ["adm"]})
        assert gone.results[0].error_code == KafkaError.none
        listed = await call(conn, ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]})
        assert listed.groups == ()


async def test_share_group_configs_are_checked_and_described(gw: Gateway) -> None:
    bs = kafka_bootstrap(gw)
    admin = AdminClient({"bootstrap.servers": bs})
    for name, value in [("share.record.lock.duration.ms", "100"), ("share.delivery.count.limit", "11"),
                        ("share.auto.offset.reset", "by_duration:yesterday"), ("share.isolation.level", "dirty"),
                        ("share.no.such.thing", "1")]:
        with pytest.raises(ck.KafkaException) as refused:
            await group_configs(bs, "cfg", **{name.replace(".", "_"): value})
        assert refused.value.args[0].code() == ck.KafkaError.INVALID_CONFIG, name
    await group_configs(bs, "cfg", share_auto_offset_reset="by_duration:PT1H30M", share_delivery_count_limit="3")
    (f,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, "cfg")]).values()
    described = await asyncio.to_thread(f.result, TIMEOUT)
    assert described["share.auto.offset.reset"].value == "by_duration:PT1H30M"
    assert described["share.delivery.count.limit"].value == "3"
    assert described["share.record.lock.duration.ms"].value == "30000"
    assert described["share.record.lock.duration.ms"].is_default


async def test_record_lock_durations_follow_the_gateway_settings(redis_url: str) -> None:
    """As Kafka's group.share.{min.,,max.}record.lock.duration.ms: the gateway's default is a group's
    share.record.lock.duration.ms until the group sets its own, which must lie between the minimum
    and the maximum (1000 ms accepted with the minimum at 1000, as librdkafka's CI runs Kafka); a
    ShareFetch answers the group's duration, and an unacknowledged record's lock expires after it."""
    cfg = test_config(redis_url, **{**SETTINGS, "group_share_min_record_lock_duration_ms": 1000,
                                    "group_share_record_lock_duration_ms": 20_000,
                                    "group_share_max_record_lock_duration_ms": 40_000})
    async with running_gateway(cfg) as g:
        bs = kafka_bootstrap(g)
        await fill(bs, 5)
        await group_configs(bs, "dur", share_auto_offset_reset="earliest")
        admin = AdminClient({"bootstrap.servers": bs})
        (f,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, "dur")]).values()
        described = (await asyncio.to_thread(f.result, TIMEOUT))["share.record.lock.duration.ms"]
        assert (described.value, described.is_default) == ("20000", True)
        tid = uuid.UUID(hex=(await services(g).log.topic(TOPIC)).topic_id)
        async with wire(g) as conn:
            assert (await share_fetch(conn, "dur", "m1", 0, tid)).acquisition_lock_timeout.total_seconds() == 20
        for refused in ("999", "40001"):
            with pytest.raises(ck.KafkaException) as exc:
                await group_configs(bs, "dur", share_record_lock_duration_ms=refused)
            assert exc.value.args[0].code() == ck.KafkaError.INVALID_CONFIG, refused
        await group_configs(bs, "short", share_auto_offset_reset="earliest", share_record_lock_duration_ms="1000")
        async with wire(g) as conn:
            got = await share_fetch(conn, "short", "m2", 0, tid)
            assert got.acquisition_lock_timeout.total_seconds() == 1
            assert {a.delivery_count for a in got.responses[0].partitions[0].acquired_records} == {1}
            # never acknowledged: after its lock of one second, m2's next fetch gets it again
            again = await share_fetch(conn, "short", "m2", 1, tid)
            assert {a.delivery_count for a in again.responses[0].partitions[0].acquired_records} == {2}


def test_record_lock_duration_settings_are_bounded_as_kafkas() -> None:
    for bad in ({"group_share_min_record_lock_duration_ms": 999},
                {"group_share_min_record_lock_duration_ms": 30_001},
                {"group_share_max_record_lock_duration_ms": 29_999},
                {"group_share_record_lock_duration_ms": 14_999},
                {"group_share_record_lock_duration_ms": 60_001}):
        with pytest.raises(ConfigError):
            Config(**bad)  # type: ignore[arg-type]
    assert Config(group_share_min_record_lock_duration_ms=1000).group_share_record_lock_duration_ms == 30_000


@pytest.mark.parametrize("version", [1, 2])
def test_share_fetch_encoder_matches_kio(version: int) -> None:
    """The hand-written ShareFetch response (record bytes as chunks) is kio's encoding byte for byte."""
    tid = uuid.uuid4()
    batch = b"\x00" * 8 + b"batch-bytes"
    parts = [SharePartition(0, 3, records=[batch[:5], memoryview(batch)[5:]], size=len(batch),
                            acquired=[(0, 4, 1), (7, 9, 2)]),
             SharePartition(1, 3, error=KafkaError.unknown_topic_id, ack_error=KafkaError.invalid_record_state),
             SharePartition(2, 5, error=KafkaError.not_leader_or_follower)]
    ours = b"".join(encode_share_fetch_response(KafkaError.none, None, 30000, [(tid, parts), (None, [])],
                                                [(5, "gw5.example", 9097)]))
    theirs = codec.encode_body(codec.build(codec.response_class(ApiKey.SHARE_FETCH, version), {
        "throttle_time": 0, "error_code": KafkaError.none, "acquisition_lock_timeout": 30000, "responses": [
            {"topic_id": tid, "partitions": [
                {"partition_index": 0, "error_code": KafkaError.none, "acknowledge_error_code": 0,
                 "current_leader": {"leader_id": 3, "leader_epoch": 0}, "records": batch,
                 "acquired_records": [{"first_offset": 0, "last_offset": 4, "delivery_count": 1},
                                      {"first_offset": 7, "last_offset": 9, "delivery_count": 2}]},
                {"partition_index": 1, "error_code": KafkaError.unknown_topic_id,
                 "acknowledge_error_code": int(KafkaError.invalid_record_state),
                 "current_leader": {"leader_id": 3, "leader_epoch": 0}, "records": b"", "acquired_records": []},
                {"partition_index": 2, "error_code": KafkaError.not_leader_or_follower, "acknowledge_error_code": 0,
                 "current_leader": {"leader_id": 5, "leader_epoch": 0}, "records": b"", "acquired_records": []}]},
            {"topic_id": uuid.UUID(int=0), "partitions": []}],
        "node_endpoints": [{"node_id": 5, "host": "gw5.example", "port": 9097, "rack": None}]}))
    failed = b"".join(encode_share_fetch_response(KafkaError.share_session_not_found, "gone", 0, [], throttle_ms=250))
    assert ours == theirs
    assert failed == codec.encode_body(codec.build(codec.response_class(ApiKey.SHARE_FETCH, version), {
        "throttle_time": 250, "error_code": KafkaError.share_session_not_found, "error_message": "gone",
        "responses": []}))


async def test_share_groups_in_the_admin_api_cli_and_metrics(gw: Gateway) -> None:
    """A record released twice and one held: the admin face counts them in flight by delivery count."""
    bs = kafka_bootstrap(gw)
    await group_configs(bs, "seen", share_auto_offset_reset="earliest")
    await fill(bs, 10)
    c = share_consumer(bs, "seen")
    try:
        first = await asyncio.to_thread(poll_until, c, lambda s: len(s) >= 1,
                                        lambda m: c.acknowledge(m, AcknowledgeType.RELEASE))
        held = await asyncio.to_thread(poll_until, c, lambda s: any(count(m) == 2 for m in s))
        async with aiohttp.ClientSession() as http:
            async with http.get(admin_url(gw) + "/admin/v2/share-groups/seen") as r:
                assert r.status == 200
                view = await r.json()
            async with http.get(admin_url(gw) + "/metrics") as r:
                metrics = await r.text()
            async with http.get(admin_url(gw) + "/admin/v2/share-groups/nobody") as r:
                assert r.status == 404
        (part,) = view["partitions"]
        assert view["state"] == "Stable" and len(view["members"]) == 1
        assert part["start_offset"] == 0 and part["in_flight"] == len(held)
        assert part["delivery_counts"]["2"] == sum(1 for m in held if count(m) == 2) >= len(first)
        assert 'gateway_share_group_members{group="seen"} 1.0' in metrics
        assert f'gateway_share_group_in_flight{{group="seen",partition="0",topic="{TOPIC}"}} {float(len(held))}' in metrics
        listed = await asyncio.to_thread(subprocess.run, [
            sys.executable, "-m", "gateway", "admin", "--admin-url", admin_url(gw), "share-groups"],
            capture_output=True, text=True, timeout=60)
        assert json.loads(listed.stdout) == {"share_groups": [{"group": "seen", "state": "Stable"}]}
    finally:
        await asyncio.to_thread(c.close)  # the gateway answers its leave on this event loop


async def test_rejected_and_over_the_limit_records_go_to_the_dead_letter_topic(gw: Gateway) -> None:
    bs = kafka_bootstrap(gw)
    await group_configs(bs, "dl", share_auto_offset_reset="earliest", share_delivery_count_limit="2",
                        share_dead_letter_topic="jobs-dlq")
    await produce("confluent", bs, TOPIC, [(b"k1", b"bad")])
    await produce("confluent", bs, TOPIC, [(b"k2", b"flaky")])
    await produce("confluent", bs, TOPIC, [(b"k3", b"after")])

    def run(c: ck.ShareConsumer) -> None:
        def act(m: ck.Message) -> None:
            kind = {b"bad": AcknowledgeType.REJECT, b"flaky": AcknowledgeType.RELEASE}.get(m.value() or b"")
            c.acknowledge(m, kind or AcknowledgeType.ACCEPT)

        poll_until(c, lambda s: b"after" in values(s) and values(s).count(b"flaky") == 2, act)

    await with_consumer(bs, "dl", run)
    dead = await asyncio.to_thread(lambda: dead_letters(bs))
    assert [(key, reason, n) for key, reason, n, _ in dead] == [(b"k1", "rejected", "1"), (b"k2", "delivery-limit", "2")]
    assert all(origin == (TOPIC, "0") for _, _, _, origin in dead)
    stats = services(gw).share.stats["dl"]  # counted once the write's reply is in, which the reader may beat
    await conftest.eventually(lambda: stats.dead_lettered == 2, timeout=TIMEOUT, what="both counted")
    assert (stats.rejected, stats.archived) == (1, 1)


async def test_a_record_is_dead_lettered_once_when_written_again(gw: Gateway) -> None:
    """A gateway that dies between the dead-letter write and the archiving acknowledgement leaves the
    record to be archived again by the next one: that second write is a duplicate and adds nothing."""
    bs = kafka_bootstrap(gw)
    await group_configs(bs, "dl2", share_dead_letter_topic="jobs-dlq")
    await produce("confluent", bs, TOPIC, [(b"k1", b"bad")])
    share = services(gw).share
    (entry,) = (await services(gw).log.read(TOPIC, 0, 0)).entries
    for _ in range(2):  # the first gateway's write, and the next one's after it died
        await share._dead_letter("dl2", TOPIC, Delivery(0, entry, {0}), [0], "rejected", 1)
    await asyncio.to_thread(produce_sync, bs, [b"end"], "jobs-dlq")
    dead = await asyncio.to_thread(read_all, bs, "jobs-dlq", b"end")
    assert dead == [b"bad", b"end"]
    assert share.stats["dl2"].dead_lettered == 1


def read_all(bs: str, topic: str, last: bytes) -> list[bytes]:
    """The values of partition 0 of `topic` from its start up to `last`."""
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": "reader", "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while last not in out:
            assert time.monotonic() < deadline, out
            m = c.poll(0.5)
            if m is not None and m.error() is None and isinstance(v := m.value(), bytes):
                out.append(v)
    finally:
        c.close()
    return out


def dead_letters(bs: str) -> list[tuple[bytes | None, str, str, tuple[str, str]]]:
    """Key, reason, delivery count and origin of each record of the dead-letter topic, in order."""
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": "dlq-reader", "enable.auto.commit": False})
    c.assign([ck.TopicPartition("jobs-dlq", 0, 0)])
    out: list[tuple[bytes | None, str, str, tuple[str, str]]] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(out) < 2 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error() is not None:
                continue
            h = {str(kv[0]): kv[1].decode() if isinstance(kv[1], bytes) else "" for kv in m.headers() or []}
            key = m.key()
            out.append((key if isinstance(key, bytes) else None, h["share.dlq.reason"], h["share.dlq.delivery.count"],
                        (h["share.dlq.topic"], h["share.dlq.partition"])))
    finally:
        c.close()
    return out


async def test_a_release_can_wait_before_redelivery(gw: Gateway) -> None:
    """With share.release.delay.ms, a released record stays out of the queue for that long, then
    comes back with a higher delivery count."""
    bs = kafka_bootstrap(gw)
    await group_configs(bs, "later", share_auto_offset_reset="earliest", share_release_delay_ms="1000")
    await fill(bs, 5)
    c = share_consumer(bs, "later")
    try:
        first = await asyncio.to_thread(poll_until, c, lambda s: len(s) >= 1,
                                        lambda m: c.acknowledge(m, AcknowledgeType.RELEASE))
        view = await services(gw).share.view("later")
        assert view is not None and view.in_flight[TOPIC][0] == {1: len(first)}  # released, and waiting
        offsets = {offset(m) for m in first}
        again = await asyncio.to_thread(poll_until, c, lambda s: offsets <= {offset(m) for m in s if count(m) == 2},
                                        lambda m: c.acknowledge(m))
        assert {offset(m) for m in again if count(m) == 2} == offsets
    finally:
        await asyncio.to_thread(c.close)
