"""Consumer groups of KIP-848's protocol with real clients: confluent-kafka consumers with
`group.protocol=consumer` joining and leaving under load (every record consumed once, no partition
owned by two members at a time), a killed member fenced, a static member restarted, a regex
subscription, the range assignor, the AdminClient's describe of consumer and classic groups, and
ConsumerGroupDescribe v1 on the wire."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import confluent_kafka as ck
import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.services import Services
from gateway.kafka.dispatch import ApiKey
from gateway.server.gateway import Gateway
from tests import conftest
from tests.conftest import kafka_bootstrap, test_config
from tests.kafka_clients import produce
from tests.kafka_wire import call

pytestmark = pytest.mark.kafka

TOPIC = "events"
SESSION_MS = 4000
HEARTBEAT_MS = 250

eventually = functools.partial(conftest.eventually, timeout=45.0)


@dataclass
class Log:
    """What every member saw, in one process's clock: ownership changes and committed records."""

    events: list[tuple[float, str, str, frozenset[tuple[str, int]]]] = field(default_factory=list)
    records: list[tuple[str, int, int, bytes, str]] = field(default_factory=list)  # topic, part, offset, value, who
    lock: threading.Lock = field(default_factory=threading.Lock)

    def event(self, who: str, what: str, parts: list[ck.TopicPartition]) -> None:
        with self.lock:
            self.events.append((time.monotonic(), who, what, frozenset((p.topic, p.partition) for p in parts)))

    def check_single_owner(self) -> None:
        """Replayed in time order, a partition is never assigned to a member while another holds it."""
        owner: dict[tuple[str, int], str] = {}
        for _, who, what, parts in sorted(self.events):
            for p in parts:
                if what == "assign":
                    assert owner.get(p) in (None, who), f"{p} assigned to {who} while {owner[p]} owns it"
                    owner[p] = who
                elif owner.get(p) == who:
                    del owner[p]


class Member:
    """A consumer of the consumer protocol in a thread: it records a record once its offset commit
    succeeded, so across the group each offset is recorded at most once if fencing works."""

    def __init__(self, name: str, bs: str, group: str, log: Log, topics: list[str], **conf: object) -> None:
        self.name, self.bs, self.group, self.log, self.topics, self.conf = name, bs, group, log, topics, conf
        self.stop = threading.Event()
        self.owned: set[tuple[str, int]] = set()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def start(self) -> Member:
        self.thread.start()
        return self

    def run(self) -> None:
        c = ck.Consumer({
            "bootstrap.servers": self.bs, "group.id": self.group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 500,
            **self.conf,
        })

        def on_assign(_: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
            self.log.event(self.name, "assign", parts)
            self.owned |= {(p.topic, p.partition) for p in parts}

        def on_revoke(_: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
            self.log.event(self.name, "revoke", parts)
            self.owned -= {(p.topic, p.partition) for p in parts}

        c.subscribe(self.topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        try:
            while not self.stop.is_set():
                m = c.poll(0.1)
                if m is None or m.error() is not None:
                    continue
                topic, part, off, value = m.topic(), m.partition(), m.offset(), m.value()
                assert topic is not None and part is not None and off is not None and value is not None
                done: list[ck.TopicPartition] | None
                try:
                    done = c.commit(offsets=[ck.TopicPartition(topic, part, off + 1)], asynchronous=False)
                except ck.KafkaException:
                    done = None
                if done is None or any(tp.error is not None for tp in done):
                    # refused (an epoch gone by): read it again, or its next owner reads it from the commit
                    if (topic, part) in self.owned:
                        c.seek(ck.TopicPartition(topic, part, off))
                    continue
                with self.log.lock:
                    self.log.records.append((topic, part, off, value, self.name))
        finally:
            c.close()

    async def close(self) -> None:
        self.stop.set()
        await asyncio.to_thread(self.thread.join, 30)
        assert not self.thread.is_alive()


@contextlib.asynccontextmanager
async def running(redis_url: str, session_ms: int = SESSION_MS) -> AsyncIterator[Gateway]:
    """An in-process gateway whose consumer groups have a short session, torn down after the test."""
    gw = Gateway(test_config(
        redis_url, group_consumer_session_timeout_ms=session_ms, group_consumer_heartbeat_interval_ms=HEARTBEAT_MS
    ))
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


def services(gw: Gateway) -> Services:
    assert gw.services is not None, "the gateway is started"
    return gw.services


def messages(start: int, stop: int) -> list[tuple[bytes | None, bytes]]:
    return [(f"k{i}".encode(), f"m-{i}".encode()) for i in range(start, stop)]


def consumed_once(log: Log, expected: int) -> bool:
    with log.lock:
        seen = [(t, p, o) for t, p, o, _, _ in log.records]
    assert len(seen) == len(set(seen)), "a record was committed by two members"
    return len(seen) >= expected


async def test_members_join_and_leave_under_load(redis_url: str) -> None:
    async with running(redis_url) as gw:
        await services(gw).log.create_topic(TOPIC, 6)
        bs, log = kafka_bootstrap(gw), Log()
        first = Member("a", bs, "g1", log, [TOPIC]).start()
        await produce("confluent", bs, TOPIC, messages(0, 300))
        await eventually(lambda: consumed_once(log, 300), what="the first member consumed everything")
        second = Member("b", bs, "g1", log, [TOPIC]).start()
        third = Member("c", bs, "g1", log, [TOPIC]).start()
        await produce("confluent", bs, TOPIC, messages(300, 600))
        await eventually(lambda: first.owned and second.owned and third.owned, what="three members sharing")
        await eventually(lambda: consumed_once(log, 600), what="600 records")
        await second.close()
        await produce("confluent", bs, TOPIC, messages(600, 900))
        await eventually(lambda: len(first.owned | third.owned) == 6, what="b's partitions moved")
        await eventually(lambda: consumed_once(log, 900), what="900 records")
        await first.close()
        await third.close()
        assert sorted(v for *_, v, _ in log.records) == sorted(v for _, v in messages(0, 900))
        log.check_single_owner()
        d = await services(gw).groups.describe_consumer("g1")
        assert d is not None and d.state == "Empty" and d.members == []  # every member left


def parts(member: Member, topic: str) -> set[int]:
    return {p for t, p in member.owned if t == topic}


# A consumer in a process of its own, to be killed: it never leaves, so only its session ends it.
KILLABLE = """
import sys, confluent_kafka as ck
c = ck.Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer"})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.2)
"""


async def test_member_that_stops_heartbeating_is_fenced(redis_url: str) -> None:
    async with running(redis_url, session_ms=2000) as gw:
        await services(gw).log.create_topic(TOPIC, 4)
        bs, log = kafka_bootstrap(gw), Log()
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", KILLABLE, bs, "gk", TOPIC)
        try:
            a = Member("a", bs, "gk", log, [TOPIC]).start()
            await eventually(lambda: len(a.owned) == 2, what="a sharing with the other process")
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        await eventually(lambda: len(a.owned) == 4, what="the killed member's partitions moved to a")
        d = await services(gw).groups.describe_consumer("gk")
        assert d is not None and len(d.members) == 1
        await a.close()


async def test_static_member_restarted_keeps_its_assignment(redis_url: str) -> None:
    async with running(redis_url, session_ms=15000) as gw:
        await services(gw).log.create_topic(TOPIC, 4)
        bs, log = kafka_bootstrap(gw), Log()
        a = Member("a", bs, "gs", log, [TOPIC], **{"group.instance.id": "ia"}).start()
        b = Member("b", bs, "gs", log, [TOPIC], **{"group.instance.id": "ib"}).start()
        await eventually(lambda: len(a.owned) == 2 and len(b.owned) == 2, what="two static members sharing")
        before = set(a.owned)
        with log.lock:
            mark = len(log.events)
        await a.close()
        d = await services(gw).groups.describe_consumer("gs")  # left for now: kept, with its partitions
        assert d is not None and {m.instance_id for m in d.members} == {"ia", "ib"}
        again = Member("a2", bs, "gs", log, [TOPIC], **{"group.instance.id": "ia"}).start()
        await eventually(lambda: again.owned == before, what="the restarted member got its partitions back")
        with log.lock:
            given_to_b = {p for _, who, what, ps in log.events[mark:] if who == "b" and what == "assign" for p in ps}
        assert given_to_b.isdisjoint(before), "the static member's partitions went to b while it restarted"
        await again.close()
        await b.close()


async def test_regex_subscription_picks_up_a_topic_created_later(redis_url: str) -> None:
    async with running(redis_url) as gw:
        await services(gw).log.create_topic("pre-a", 2)
        await services(gw).log.create_topic("other", 2)
        bs, log = kafka_bootstrap(gw), Log()
        a = Member("a", bs, "gr", log, ["^pre-.*"]).start()
        await eventually(lambda: a.owned == {("pre-a", 0), ("pre-a", 1)}, what="the matching topic assigned")
        await services(gw).log.create_topic("pre-b", 2)
        await produce("confluent", bs, "pre-b", messages(0, 50))
        # as Kafka's coordinator, the gateway looks for new topics at most every 10 s (consumer.py)
        await eventually(lambda: consumed_once(log, 50), what="the later topic consumed")
        assert a.owned == {("pre-a", 0), ("pre-a", 1), ("pre-b", 0), ("pre-b", 1)}
        await a.close()


async def test_regex_matches_come_after_the_literal_topics(redis_url: str) -> None:
    """Kafka resolves a new regex off the heartbeat that brings it: the first assignment has the
    subscription's literal topics, the regex's matches come with a later heartbeat."""
    async with running(redis_url) as gw:
        await services(gw).log.create_topic("plain", 1)
        await services(gw).log.create_topic("rx-a", 2)
        bs, log = kafka_bootstrap(gw), Log()
        a = Member("a", bs, "gx", log, ["plain", "^rx-.*"]).start()
        await eventually(lambda: a.owned == {("plain", 0), ("rx-a", 0), ("rx-a", 1)}, what="both assigned")
        with log.lock:
            assigned = [parts for _, who, what, parts in sorted(log.events) if what == "assign"]
        assert assigned == [frozenset({("plain", 0)}), frozenset({("rx-a", 0), ("rx-a", 1)})]
        await a.close()


async def test_range_assignor_co_partitions(redis_url: str) -> None:
    async with running(redis_url) as gw:
        for t in ("r1", "r2"):
            await services(gw).log.create_topic(t, 4)
        bs, log = kafka_bootstrap(gw), Log()
        members = [Member(n, bs, "gg", log, ["r1", "r2"], **{"group.remote.assignor": "range"}).start()
                   for n in ("a", "b")]
        await eventually(lambda: all(len(m.owned) == 4 for m in members), what="two members sharing by range")
        for m in members:
            assert parts(m, "r1") == parts(m, "r2") in ({0, 1}, {2, 3})
        d = await services(gw).groups.describe_consumer("gg")
        assert d is not None and d.assignor == "range"
        for m in members:
            await m.close()


async def test_describe_consumer_groups_with_admin_client(redis_url: str) -> None:
    async with running(redis_url) as gw:
        await services(gw).log.create_topic(TOPIC, 4)
        bs, log = kafka_bootstrap(gw), Log()
        a = Member("a", bs, "gd", log, [TOPIC], **{"client.id": "ca"}).start()
        b = Member("b", bs, "gd", log, [TOPIC], **{"client.id": "cb", "group.instance.id": "ib"}).start()
        await eventually(lambda: len(a.owned) == 2 and len(b.owned) == 2, what="two members sharing")
        classic = ck.Consumer({"bootstrap.servers": bs, "group.id": "gc"})  # a classic group, offsets only
        await asyncio.to_thread(classic.commit, offsets=[ck.TopicPartition(TOPIC, 0, 1)], asynchronous=False)
        classic.close()
        admin = AdminClient({"bootstrap.servers": bs})
        futs = admin.describe_consumer_groups(["gd", "gc", "nobody"], request_timeout=10)
        d = await asyncio.to_thread(futs["gd"].result, 15)
        assert d.group_id == "gd" and d.type == ConsumerGroupType.CONSUMER and d.state == ConsumerGroupState.STABLE
        assert d.partition_assignor == "uniform" and not d.is_simple_consumer_group
        got = {m.client_id: ({(p.topic, p.partition) for p in m.assignment.topic_partitions}, m.group_instance_id)
               for m in d.members}
        assert got == {"ca": (a.owned, None), "cb": (b.owned, "ib")}
        # not consumer groups: the client falls back to DescribeGroups on GROUP_ID_NOT_FOUND
        gc = await asyncio.to_thread(futs["gc"].result, 15)
        assert gc.type == ConsumerGroupType.CLASSIC and gc.state == ConsumerGroupState.EMPTY
        nobody = await asyncio.to_thread(futs["nobody"].result, 15)
        assert nobody.state == ConsumerGroupState.DEAD and nobody.members == []
        await a.close()
        await b.close()

        async def describe() -> tuple[ConsumerGroupState, list[str | None]]:
            got = await asyncio.to_thread(admin.describe_consumer_groups(["gd"], request_timeout=10)["gd"].result, 15)
            assert got.type == ConsumerGroupType.CONSUMER
            return got.state, [m.group_instance_id for m in got.members]

        async def empty() -> bool:
            return await describe() == (ConsumerGroupState.EMPTY, [])

        # the static member left for now (Kafka's Reconciling, which librdkafka names UNKNOWN) until its
        # session ends; then the group is empty
        assert (await describe())[1] == ["ib"]
        await eventually(empty, what="the static member's session ended")


async def test_consumer_group_describe_v1_on_the_wire(redis_url: str) -> None:
    """v1 (the Java admin client's, which no client here sends) adds each member's type."""
    async with running(redis_url) as gw:
        await services(gw).log.create_topic(TOPIC, 2)
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
        try:
            joined = await call((reader, writer), ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {
                "group_id": "gw1", "member_id": "", "member_epoch": 0, "rebalance_timeout": 30000,
                "subscribed_topic_names": [TOPIC], "topic_partitions": []})
            assert joined.error_code == KafkaError.none
            resp = await call((reader, writer), ApiKey.CONSUMER_GROUP_DESCRIBE, 1,
                              {"group_ids": ["gw1", "none"], "include_authorized_operations": False})
        finally:
            writer.close()
        found, missing = resp.groups
        assert (found.error_code, found.group_state, found.assignor_name) == (KafkaError.none, "Stable", "uniform")
        [m] = found.members
        assert (m.member_id, m.member_type, m.client_id) == (joined.member_id, 1, "test")
        assert [(t.topic_name, list(t.partitions)) for t in m.assignment.topic_partitions] == [(TOPIC, [0, 1])]
        assert missing.error_code == KafkaError.group_id_not_found
