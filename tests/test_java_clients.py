"""Apache Kafka 4.4's own Java clients, unchanged, against the gateway, and the same programs against
a real Kafka 4.4 broker: what each observes must be the same (tests/jvm/src holds the programs)."""

from __future__ import annotations

import pytest

from tests.kafka_clients import create_topic
from tests.kafka_jvm import java, same_on_both, unique
from tests.test_kafka_share import group_configs

pytestmark = [pytest.mark.jvm, pytest.mark.kafka, pytest.mark.slow]


async def test_idempotent_producer(gateway, kafka_broker):
    topic = unique("idempotent")

    async def scenario(bs: str) -> tuple[list[str], list[str]]:
        await create_topic(bs, topic, 1)
        acks = await java("gateway.jvm.Produce", bs, topic, "send:20", "enable.idempotence=true", "acks=all",
                          "max.in.flight.requests.per.connection=5", "linger.ms=5")
        read = await java("gateway.jvm.Consume", bs, topic, "0")
        return acks.lines(), read.lines()

    acks, read = await same_on_both(gateway, kafka_broker, scenario)
    assert read == acks and [line.split()[1] for line in acks] == [str(i) for i in range(20)]


async def test_transactional_producer_commits_and_aborts(gateway, kafka_broker):
    """read_committed sees the committed transactions alone; read_uncommitted sees every record, and
    both see the offsets the transaction markers take."""
    topic = unique("txn")

    async def scenario(bs: str) -> tuple[list[str], list[str], list[str]]:
        await create_topic(bs, topic, 1)
        produced = await java("gateway.jvm.Produce", bs, topic, "commit:4,abort:3,commit:2",
                              f"transactional.id={topic}", "acks=all")
        committed = await java("gateway.jvm.Consume", bs, topic, "0", "isolation.level=read_committed")
        everything = await java("gateway.jvm.Consume", bs, topic, "0", "isolation.level=read_uncommitted")
        return produced.lines(), committed.lines(), everything.lines()

    produced, committed, everything = await same_on_both(gateway, kafka_broker, scenario)
    assert [line.split()[2] for line in committed] == [f"commit-{i}" for i in (0, 1, 2, 3, 7, 8)]
    assert len(everything) == 9 and [line for line in produced if " " in line] == everything


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_group_consumer(gateway, kafka_broker, protocol):
    """A subscribed KafkaConsumer of either group protocol reads everything and commits its positions."""
    topic = unique(f"group-{protocol}")

    async def scenario(bs: str) -> tuple[list[str], list[str]]:
        await create_topic(bs, topic, 3)
        await java("gateway.jvm.Produce", bs, topic, "send:30")
        read = await java("gateway.jvm.Consume", bs, topic, "30", f"group.id={topic}", f"group.protocol={protocol}",
                          "auto.offset.reset=earliest", "enable.auto.commit=false")
        records = [line for line in read.lines() if not line.startswith("committed")]
        return sorted(records), [line for line in read.lines() if line.startswith("committed")]

    records, committed = await same_on_both(gateway, kafka_broker, scenario)
    assert len(records) == 30 and len(committed) == 3


async def test_share_consumer(gateway, kafka_broker):
    """KafkaShareConsumer reads every record of a share group once and acknowledges it."""
    topic = unique("share")

    async def scenario(bs: str) -> list[str]:
        await create_topic(bs, topic, 2)
        await java("gateway.jvm.Produce", bs, topic, "send:20")
        await group_configs(bs, topic, share_auto_offset_reset="earliest")
        read = await java("gateway.jvm.ShareConsume", bs, topic, "20", f"group.id={topic}")
        return sorted(read.lines())

    records = await same_on_both(gateway, kafka_broker, scenario)
    assert len(records) == 20


async def test_admin_client(gateway, kafka_broker):
    """The Admin client's common methods, in one scenario (tests/jvm/.../AdminOps.java): topics,
    configs, offsets by time, records deleted, partitions added, group offsets, ACLs."""
    topic = unique("admin")

    async def scenario(bs: str) -> list[str]:
        return (await java("gateway.jvm.AdminOps", bs, topic)).lines()

    report = await same_on_both(gateway, kafka_broker, scenario)
    assert "delete records: 4" in report and "offset earliest: 4" in report
