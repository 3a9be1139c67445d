"""Consumer groups of KIP-848's protocol with a real client: confluent-kafka consumers with
`group.protocol=consumer` joining and leaving under load,
and every record consumed once with no partition owned by two members at a time."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from dataclasses import dataclass, field

import confluent_kafka as ck
import pytest

from gateway.server.gateway import Gateway
from tests import conftest
from tests.conftest import kafka_bootstrap, test_config
from tests.kafka_clients import produce

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
                try:
                    done = c.commit(offsets=[ck.TopicPartition(m.topic(), m.partition(), m.offset() + 1)],
                                    asynchronous=False)
                except ck.KafkaException:
                    done = None
                if done is None or any(tp.error is not None for tp in done):
                    # refused (an epoch gone by): read it again, or its next owner reads it from the commit
                    if (m.topic(), m.partition()) in self.owned:
                        c.seek(ck.TopicPartition(m.topic(), m.partition(), m.offset()))
                    continue
                with self.log.lock:
                    self.log.records.append((m.topic(), m.partition(), m.offset(), m.value(), self.name))
        finally:
            c.close()

    async def close(self) -> None:
        self.stop.set()
        await asyncio.to_thread(self.thread.join, 30)
        assert not self.thread.is_alive()


def _gateway(redis_url: str) -> Gateway:
    return Gateway(test_config(
        redis_url, group_consumer_session_timeout_ms=SESSION_MS, group_consumer_heartbeat_interval_ms=HEARTBEAT_MS
    ))


def messages(start: int, stop: int) -> list[tuple[bytes, bytes]]:
    return [(f"k{i}".encode(), f"m-{i}".encode()) for i in range(start, stop)]


def consumed_once(log: Log, expected: int) -> bool:
    with log.lock:
        seen = [(t, p, o) for t, p, o, _, _ in log.records]
    assert len(seen) == len(set(seen)), "a record was committed by two members"
    return len(seen) >= expected


async def test_members_join_and_leave_under_load(redis_url: str) -> None:
    gw = _gateway(redis_url)
    await gw.start()
    try:
        await gw.services.log.create_topic(TOPIC, 6)
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
        d = await gw.services.groups.describe_consumer("g1")
        assert d is not None and d.state == "Empty" and d.members == []  # every member left
    finally:
        await gw.stop()
