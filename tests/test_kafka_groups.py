"""Consumer groups with the real clients: confluent-kafka, kafka-python and aiokafka in one group,
rebalances as members come and go, a member killed without leaving, static membership, offsets
across a gateway restart, and the admin calls of confluent-kafka's AdminClient."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import subprocess
import sys
import threading
import time

import confluent_kafka as ck
import kafka
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTP
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor as AioRoundRobin
from aiokafka.errors import KafkaError as AioKafkaError
from aiokafka.structs import OffsetAndMetadata as AioOffset
from confluent_kafka.admin import AdminClient
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from gateway.server.gateway import Gateway
from tests import conftest
from tests.conftest import kafka_bootstrap, run_example, test_config
from tests.kafka_clients import produce

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster

pytestmark = pytest.mark.kafka

TOPIC = "orders"
SESSION_MS = 6000
HEARTBEAT_MS = 300
REBALANCE_MS = 10000
Seen = tuple[int, int, bytes, str]  # partition, offset, value, which client


eventually = functools.partial(conftest.eventually, timeout=30.0)  # rebalances take seconds each


def values(start: int, stop: int) -> list[tuple[bytes, bytes]]:
    return [(f"k{i}".encode(), f"m-{i}".encode()) for i in range(start, stop)]


class Member:
    """A group member that records a message only once its offset commit succeeded, so across
    the whole group every offset is recorded at most once if the coordinator fences stale owners."""

    name = ""

    def __init__(self, bs: str, group: str, sink: list[Seen], **conf: object) -> None:
        self.bs, self.group, self.sink, self.conf = bs, group, sink, conf
        self.stop = threading.Event()
        self.assigned: set[int] = set()
        self.assignments = 0


class ConfluentMember(Member):
    name = "confluent"

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        c = ck.Consumer({
            "bootstrap.servers": self.bs, "group.id": self.group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
            "max.poll.interval.ms": REBALANCE_MS, "partition.assignment.strategy": "roundrobin",
            "topic.metadata.refresh.interval.ms": 1000, **self.conf,
        })

        def on_assign(_: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
            self.assigned = {p.partition for p in parts}
            self.assignments += 1

        def on_revoke(_: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
            self.assigned = set()

        c.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self.stop.is_set():
                m = c.poll(0.1)
                if m is None or m.error() is not None:
                    continue
                if m.partition() not in {tp.partition for tp in c.assignment()}:
                    continue  # revoked since it was fetched: its new owner processes it
                try:
                    done = c.commit(offsets=[ck.TopicPartition(TOPIC, m.partition(), m.offset() + 1)],
                                    asynchronous=False)
                except ck.KafkaException:
                    continue
                if done is None or any(tp.error is not None for tp in done):
                    continue  # refused for this partition (a generation gone by): not ours to count
                self.sink.append((m.partition(), m.offset(), m.value(), self.name))
        finally:
            c.close()

    async def close(self) -> None:
        self.stop.set()
        await asyncio.to_thread(self.thread.join, 20)
        assert not self.thread.is_alive()


class KafkaPythonMember(ConfluentMember):
    name = "kafka-python"

    def run(self) -> None:
        member = self

        class Listener(kafka.ConsumerRebalanceListener):
            def on_partitions_assigned(self, assigned: set[kafka.TopicPartition]) -> None:
                member.assigned = {tp.partition for tp in assigned}
                member.assignments += 1

            def on_partitions_revoked(self, revoked: set[kafka.TopicPartition]) -> None:
                member.assigned = set()

        c = kafka.KafkaConsumer(
            bootstrap_servers=self.bs, group_id=self.group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
            max_poll_interval_ms=REBALANCE_MS, partition_assignment_strategy=[RoundRobinPartitionAssignor],
            metadata_max_age_ms=1000, **self.conf,
        )
        c.subscribe([TOPIC], listener=Listener())
        try:
            while not self.stop.is_set():
                for tp, records in c.poll(timeout_ms=100).items():
                    for r in records:
                        if tp not in c.assignment():
                            break  # a commit inside this loop rebalanced the group and took tp away
                        try:
                            c.commit({tp: kafka.OffsetAndMetadata(r.offset + 1, "", -1)})
                        except kafka.errors.KafkaError:
                            break
                        self.sink.append((r.partition, r.offset, r.value, self.name))
        finally:
            c.close()


class AiokafkaMember(Member):
    name = "aiokafka"

    def start(self) -> None:
        self.task = asyncio.ensure_future(self.run())

    async def run(self) -> None:
        member = self
        from aiokafka.abc import ConsumerRebalanceListener

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_assigned(self, assigned: set[AioTP]) -> None:
                member.assigned = {tp.partition for tp in assigned}
                member.assignments += 1

            async def on_partitions_revoked(self, revoked: set[AioTP]) -> None:
                member.assigned = set()

        c = AIOKafkaConsumer(
            bootstrap_servers=self.bs, group_id=self.group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
            max_poll_interval_ms=REBALANCE_MS, rebalance_timeout_ms=REBALANCE_MS,
            partition_assignment_strategy=(AioRoundRobin,), metadata_max_age_ms=1000, **self.conf,
        )
        await c.start()
        c.subscribe([TOPIC], listener=Listener())
        try:
            while not self.stop.is_set():
                batches = await c.getmany(timeout_ms=100)
                for tp, records in batches.items():
                    for r in records:
                        if tp not in c.assignment():
                            break  # revoked since it was fetched: its new owner processes it
                        try:
                            await c.commit({tp: AioOffset(r.offset + 1, "")})
                        except AioKafkaError:
                            break
                        self.sink.append((r.partition, r.offset, r.value, self.name))
        finally:
            await c.stop()

    async def close(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 20)


def exactly_once_each(sink: list[Seen], count: int) -> bool:
    return len({v for _, _, v, _ in sink}) >= count


async def test_three_clients_share_a_group_and_rebalance_without_loss_or_duplicates(gateway):
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic(TOPIC, 6)
    sink: list[Seen] = []
    await produce("confluent", bs, TOPIC, values(0, 200))
    first = ConfluentMember(bs, "shop", sink)
    first.start()
    await eventually(lambda: first.assigned == set(range(6)), what="the first member owning every partition")
    await eventually(lambda: len(sink) >= 50, what="the first member consuming")

    second = KafkaPythonMember(bs, "shop", sink)
    second.start()
    await eventually(lambda: len(first.assigned) == 3 and len(second.assigned) == 3, what="a 3/3 split")
    await produce("kafka-python", bs, TOPIC, values(200, 400))

    third = AiokafkaMember(bs, "shop", sink)
    third.start()
    await eventually(
        lambda: [len(m.assigned) for m in (first, second, third)] == [2, 2, 2], what="a 2/2/2 split"
    )
    assert first.assigned | second.assigned | third.assigned == set(range(6))
    await produce("aiokafka", bs, TOPIC, values(400, 600))
    await eventually(lambda: {n for *_, n in sink} == {"confluent", "kafka-python", "aiokafka"}, what="all consuming")

    await second.close()  # leaves the group: the others take its partitions over
    await eventually(lambda: len(first.assigned) == 3 and len(third.assigned) == 3, what="a 3/3 split after leaving")
    await produce("confluent", bs, TOPIC, values(600, 700))
    await eventually(lambda: exactly_once_each(sink, 700), what="every message consumed")
    await asyncio.gather(first.close(), third.close())

    seen = [(p, o) for p, o, _, _ in sink]
    assert len(seen) == len(set(seen)) == 700, "an offset was committed twice"
    assert sorted(v for *_, v, _ in sink) == sorted(v for _, v in values(0, 700))
    committed = await gateway.services.groups.fetch_offsets("shop")
    ends = {p: (await gateway.services.log.bounds(TOPIC, p))[1] for p in range(6)}
    assert {p: c.offset for (_, p), c in committed.items()} == ends


KILLABLE = """
import sys, confluent_kafka as ck
c = ck.Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "session.timeout.ms": int(sys.argv[4]),
                 "heartbeat.interval.ms": int(sys.argv[5]), "partition.assignment.strategy": "roundrobin"})
c.subscribe([sys.argv[3]], on_assign=lambda _, ps: print("assigned", len(ps), flush=True))
while True:
    c.poll(0.1)
"""


async def test_a_member_killed_without_leaving_loses_its_partitions_after_the_session_timeout(gateway):
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic(TOPIC, 6)
    sink: list[Seen] = []
    survivor = AiokafkaMember(bs, "g", sink)
    survivor.start()
    await eventually(lambda: survivor.assigned == set(range(6)), what="the survivor owning everything")
    victim = subprocess.Popen(
        [sys.executable, "-c", KILLABLE, bs, "g", TOPIC, str(SESSION_MS), str(HEARTBEAT_MS)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert victim.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(victim.stdout.readline), 30)
        assert line.strip() == "assigned 3"
        await eventually(lambda: len(survivor.assigned) == 3, what="the survivor giving up half")
        victim.kill()  # no LeaveGroup: only the missing heartbeats tell
        victim.wait(10)
        killed_at = time.monotonic()
        await eventually(lambda: survivor.assigned == set(range(6)), what="reassignment after the session timeout")
        assert time.monotonic() - killed_at >= SESSION_MS / 1000 - 1.5
        described = await gateway.services.groups.describe("g")
        assert len(described.members) == 1
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(10)
        await survivor.close()


async def test_a_static_member_restarts_without_a_rebalance(gateway):
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic(TOPIC, 6)
    sink: list[Seen] = []
    coord = gateway.services.groups
    static = ConfluentMember(bs, "g", sink, **{"group.instance.id": "warehouse-1"})
    other = KafkaPythonMember(bs, "g", sink)
    static.start()
    await eventually(lambda: static.assigned == set(range(6)), what="the static member owning everything")
    other.start()
    await eventually(lambda: len(static.assigned) == 3 and len(other.assigned) == 3, what="a 3/3 split")
    before = await coord.store.load("g")
    owned, other_rounds = set(static.assigned), other.assignments
    old_member = next(m.member_id for m in before.members.values() if m.instance_id == "warehouse-1")

    await static.close()  # a static member does not leave on close: its slot waits for it
    back = ConfluentMember(bs, "g", sink, **{"group.instance.id": "warehouse-1"})
    back.start()
    await eventually(lambda: back.assigned == owned, what="the restarted member getting its partitions back")
    after = await coord.store.load("g")
    assert after.generation == before.generation and after.state == "Stable"
    assert old_member not in after.members and len(after.members) == 2
    assert other.assignments == other_rounds and len(other.assigned) == 3  # the other member saw nothing
    await produce("confluent", bs, TOPIC, values(0, 60))
    await eventually(lambda: exactly_once_each(sink, 60), what="both consuming")
    await asyncio.gather(back.close(), other.close())


async def test_committed_offsets_survive_a_gateway_restart(redis_url):
    gw = Gateway(test_config(redis_url))
    await gw.start()
    port = gw.listeners["kafka"].port
    bs = kafka_bootstrap(gw)
    sink: list[Seen] = []
    try:
        await gw.services.log.create_topic(TOPIC, 6)
        await produce("aiokafka", bs, TOPIC, values(0, 90))
        member = ConfluentMember(bs, "durable", sink)
        member.start()
        await eventually(lambda: exactly_once_each(sink, 90), what="the first 90 consumed")
        # the member stays in the group while the gateway goes away and comes back on the same port
    finally:
        await gw.stop()
    gw = Gateway(test_config(redis_url, kafka_port=port))
    await gw.start()
    try:
        described = await gw.services.groups.describe("durable")
        assert described is not None and described.protocol_type == "consumer"
        await produce("kafka-python", bs, TOPIC, values(90, 150))
        await eventually(lambda: exactly_once_each(sink, 150), what="the member carrying on after the restart")
        await member.close()
        # a new member of the group starts exactly where the group's commits left off
        await produce("confluent", bs, TOPIC, values(150, 180))
        late: list[Seen] = []
        newcomer = KafkaPythonMember(bs, "durable", late)
        newcomer.start()
        await eventually(lambda: exactly_once_each(late, 30), what="the newcomer consuming the rest")
        await newcomer.close()
        assert sorted(v for *_, v, _ in late) == sorted(v for _, v in values(150, 180))
        seen = [(p, o) for p, o, _, _ in sink]
        assert len(seen) == len(set(seen)) == 150
    finally:
        await gw.stop()


async def test_admin_client_lists_describes_and_deletes_groups(gateway):
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic(TOPIC, 6)
    await produce("confluent", bs, TOPIC, values(0, 30))
    sink: list[Seen] = []
    member = ConfluentMember(bs, "audit", sink, **{"client.id": "auditor"})
    member.start()
    await eventually(lambda: exactly_once_each(sink, 30), what="the group consuming")
    admin = AdminClient({"bootstrap.servers": bs})

    def call(fut_or_map: object) -> object:
        return fut_or_map.result(10)  # type: ignore[attr-defined]

    try:
        listed = await asyncio.to_thread(call, admin.list_consumer_groups())
        assert [(g.group_id, g.state) for g in listed.valid] == [("audit", ck.ConsumerGroupState.STABLE)]
        stable_only = await asyncio.to_thread(
            call, admin.list_consumer_groups(states={ck.ConsumerGroupState.EMPTY})
        )
        assert stable_only.valid == []
        desc = await asyncio.to_thread(call, admin.describe_consumer_groups(["audit"])["audit"])
        assert desc.state == ck.ConsumerGroupState.STABLE and desc.partition_assignor == "roundrobin"
        (m,) = desc.members
        assert m.client_id == "auditor" and m.host.startswith("/127.0.0.1")
        assert sorted(tp.partition for tp in m.assignment.topic_partitions) == list(range(6))
        offsets = await asyncio.to_thread(
            call, admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions("audit")])["audit"]
        )
        ends = {p: (await gateway.services.log.bounds(TOPIC, p))[1] for p in range(6)}
        assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == ends

        busy = admin.delete_consumer_groups(["audit"])["audit"]
        with pytest.raises(ck.KafkaException) as exc:
            await asyncio.to_thread(call, busy)
        assert exc.value.args[0].code() == ck.KafkaError.NON_EMPTY_GROUP
        await member.close()
        # an empty group's offsets may be set from outside it (a simple commit)
        rewind = [ck.ConsumerGroupTopicPartitions("audit", [ck.TopicPartition(TOPIC, 0, 0)])]
        await asyncio.to_thread(call, admin.alter_consumer_group_offsets(rewind)["audit"])
        offsets = await asyncio.to_thread(
            call, admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions("audit")])["audit"]
        )
        assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {**ends, 0: 0}
        await asyncio.to_thread(call, admin.delete_consumer_groups(["audit"])["audit"])
        listed = await asyncio.to_thread(call, admin.list_consumer_groups())
        assert listed.valid == []
        gone = admin.delete_consumer_groups(["audit"])["audit"]
        with pytest.raises(ck.KafkaException) as exc:
            await asyncio.to_thread(call, gone)
        assert exc.value.args[0].code() == ck.KafkaError.GROUP_ID_NOT_FOUND
    finally:
        if member.thread.is_alive():
            await member.close()


async def test_the_consumer_group_example_resumes_after_its_commits(gateway):
    await gateway.services.log.create_topic("demo", 3)
    code, text = await run_example("kafka_consumer_group.py", gateway)
    assert code == 0, text
    assert "done: consumed 10, then 0 on rejoining" in text, text
    committed = await gateway.services.groups.fetch_offsets("demo-readers")
    assert sum(c.offset for c in committed.values()) == 10


async def test_two_gateways_share_a_group_through_its_coordinator_and_hand_it_over(redis_url):
    a = Gateway(test_config(redis_url, node_id=0))
    b = Gateway(test_config(redis_url, node_id=1))
    await a.start()
    await b.start()
    both = f"{kafka_bootstrap(a)},{kafka_bootstrap(b)}"
    sink: list[Seen] = []
    members: list[Member] = []
    try:
        await a.services.log.create_topic(TOPIC, 6)
        await produce("confluent", kafka_bootstrap(b), TOPIC, values(0, 100))
        first = AiokafkaMember(kafka_bootstrap(a), "multi", sink)
        members.append(first)
        first.start()
        await eventually(lambda: first.assigned == set(range(6)), what="the first member owning everything")
        # bootstrapped on the other gateway, which names the first one as the group's coordinator
        second = ConfluentMember(kafka_bootstrap(b), "multi", sink)
        members.append(second)
        second.start()
        await eventually(lambda: len(first.assigned) == 3 and len(second.assigned) == 3, what="a 3/3 split")
        await eventually(lambda: exactly_once_each(sink, 100), what="the first 100 consumed")
        assert a.services.groups.node_id == 0
        assert await b.services.groups.locate("multi") == (0, "127.0.0.1", a.listeners["kafka"].port)
        # a third member that can reach both; then the coordinating gateway goes away. (librdkafka
        # keeps its bootstrap servers; the Python clients only know the brokers Metadata listed)
        third = ConfluentMember(both, "multi", sink)
        members.append(third)
        third.start()
        await eventually(lambda: [len(m.assigned) for m in members] == [2, 2, 2], what="a 2/2/2 split")
        await first.close()  # its only gateway is going away
        await a.stop()
        await eventually(lambda: len(second.assigned) == 3 and len(third.assigned) == 3, what="a 3/3 split on b")
        assert await b.services.groups.locate("multi") == (1, "127.0.0.1", b.listeners["kafka"].port)
        await produce("kafka-python", kafka_bootstrap(b), TOPIC, values(100, 200))
        await eventually(lambda: exactly_once_each(sink, 200), what="all 200 consumed")
        await asyncio.gather(second.close(), third.close())
        seen = [(p, o) for p, o, _, _ in sink]
        assert len(seen) == len(set(seen)) == 200
    finally:
        for m in members:
            if not m.stop.is_set():
                with contextlib.suppress(Exception):
                    await m.close()
        await a.stop()
        await b.stop()


async def test_consumers_starting_together_share_the_first_assignment(redis_url):
    """With Kafka's group.initial.rebalance.delay.ms (3 s by default) the first rebalance of a new
    group waits for the members starting together: each gets its share at once, and none has to
    give partitions back in a second rebalance (with no delay the first would own everything)."""
    gw = Gateway(test_config(redis_url, group_initial_rebalance_delay_ms=3000))
    await gw.start()
    stop = threading.Event()
    events: dict[str, list[tuple[str, set[int]]]] = {"a": [], "b": []}

    def member(name: str) -> None:
        c = ck.Consumer({
            "bootstrap.servers": kafka_bootstrap(gw), "group.id": "together", "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS, "partition.assignment.strategy": "cooperative-sticky",
        })
        seen = events[name]
        c.subscribe(
            [TOPIC],
            on_assign=lambda _, parts: seen.append(("assigned", {p.partition for p in parts})),
            on_revoke=lambda _, parts: seen.append(("revoked", {p.partition for p in parts})),
        )
        try:
            while not stop.is_set():
                c.poll(0.1)
        finally:
            c.close()

    threads = [threading.Thread(target=member, args=(n,), daemon=True) for n in events]
    try:
        await gw.services.log.create_topic(TOPIC, 4)
        threads[0].start()  # b starts once a waits in the group, so without the delay a would own everything first
        await eventually(lambda: _members(gw, "together"), what="a in the group")
        threads[1].start()

        def owned(name: str) -> set[int]:
            mine: set[int] = set()
            for kind, parts in events[name]:
                mine = mine | parts if kind == "assigned" else mine - parts
            return mine

        await eventually(lambda: len(owned("a")) == len(owned("b")) == 2, timeout=30, what="a 2/2 split")
        assert owned("a") | owned("b") == {0, 1, 2, 3}
        assert all(not parts for name in events for kind, parts in events[name] if kind == "revoked"), events
    finally:
        stop.set()
        for t in threads:
            await asyncio.to_thread(t.join)
        await gw.stop()


async def _members(gw: Gateway, group_id: str) -> int:
    d = await gw.services.groups.describe(group_id)
    return len(d.members) if d else 0


def _commit_for_another_member(bs: str) -> None:
    """Two confluent-kafka members share a topic; one commits the partition the rebalance gave the
    other, as a client does with a record it fetched before the rebalance."""
    conf = {"bootstrap.servers": bs, "group.id": "gu", "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
            "partition.assignment.strategy": "roundrobin"}
    a, b = ck.Consumer(conf), ck.Consumer(conf)
    deadline = time.monotonic() + 30

    def poll_until(done: object) -> None:
        while not done():  # type: ignore[operator]
            assert time.monotonic() < deadline, "the group did not settle"
            for c in members:
                c.poll(0.05)

    members = [a]
    a.subscribe([TOPIC])
    poll_until(lambda: len(a.assignment()) == 2)
    members.append(b)
    b.subscribe([TOPIC])
    poll_until(lambda: len(a.assignment()) == len(b.assignment()) == 1)
    [theirs] = b.assignment()
    done = a.commit(offsets=[ck.TopicPartition(TOPIC, theirs.partition, 5)], asynchronous=False)
    assert done is not None and [(tp.partition, tp.error) for tp in done] == [(theirs.partition, None)]
    [committed] = b.committed([ck.TopicPartition(TOPIC, theirs.partition)], timeout=10)
    assert committed.offset == 5
    for c in members:
        c.poll(0.05)
    assert [tp.partition for tp in b.assignment()] == [theirs.partition]  # no rebalance came of it
    a.close()
    b.close()


async def test_a_member_commits_a_partition_another_member_owns(gateway):
    """Kafka's ClassicGroup.validateOffsetCommit checks only the member id and the generation."""
    await gateway.services.log.create_topic(TOPIC, 2)
    await asyncio.to_thread(_commit_for_another_member, kafka_bootstrap(gateway))
