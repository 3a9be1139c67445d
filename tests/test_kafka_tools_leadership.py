"""Leadership moves (AlterPartitionReassignments, ListPartitionReassignments, ElectLeaders): their
answers compared with a real Kafka 4.4 broker where one node can show them (its own node id, and one
no broker has), then Kafka's own tools moving a partition's leader between gateways."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from gateway.store import Store
from gateway.store.registry import Placement
from tests.conftest import eventually, kafka_bootstrap, running_gateway, test_config
from tests.differential import Side, compare
from tests.kafka_clients import create_topic
from tests.kafka_jvm import tools


async def _node(s: Side) -> int:
    return int((await s.call(3, 12, {"topics": None}))["brokers"][0]["node_id"])


def _anonymous(answer: Any, node: int) -> Any:
    """The answer with the side's node ids as names, so that both sides' compare (node 1 is Kafka's,
    a gateway's is another)."""
    return json.loads(json.dumps(answer).replace(str(node + 1000), "MISSING"))


async def reassignments(s: Side, name: str) -> Any:
    """Every refusal one node can show, a reassignment onto the node itself, then what is listed."""
    node = await _node(s)
    created = await s.call(19, 7, {"topics": [{"name": name, "num_partitions": 5, "replication_factor": 1}],
                                   "timeout": 10_000})
    assert created["topics"][0]["error_code"] == 0, created
    answers = []
    for version in (0, 1):
        answers.append(await s.call(45, version, {"timeout": 10_000, "topics": [
            {"name": name, "partitions": [
                {"partition_index": 0, "replicas": [node]},
                {"partition_index": 1, "replicas": [node + 1000]},
                {"partition_index": 2, "replicas": [node, node]},
                {"partition_index": 3, "replicas": []},
                {"partition_index": 4, "replicas": None},
                {"partition_index": 9, "replicas": [node]}]},
            {"name": name + "-absent", "partitions": [{"partition_index": 0, "replicas": [node]}]}]}))
    answers.append(await s.call(45, 1, {"timeout": 10_000, "allow_replication_factor_change": False, "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "replicas": [node]}]}]}))
    answers.append(await s.call(46, 0, {"timeout": 10_000, "topics": None}))
    meta = await s.call(3, 12, {"topics": [{"name": name}]})
    answers.append([p["replica_nodes"] == [node] for p in meta["topics"][0]["partitions"]])
    return _anonymous(answers, node)


async def elections(s: Side, name: str) -> Any:
    """Preferred and unclean elections of a partition led by its preferred replica, of one and of a
    topic that do not exist, and of every partition."""
    node = await _node(s)
    await s.call(19, 7, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}], "timeout": 10_000})
    named = [{"topic": name, "partitions": [0, 7]}, {"topic": name + "-absent", "partitions": [0]}]
    answers = [await s.call(43, 0, {"timeout": 10_000, "topic_partitions": named})]
    for kind in (0, 1):
        answers.append(await s.call(43, 2, {"election_type": kind, "timeout": 10_000, "topic_partitions": named}))
        every = await s.call(43, 2, {"election_type": kind, "timeout": 10_000, "topic_partitions": None})
        answers.append([t for t in every["replica_election_results"] if t["topic"] == name])  # others' too
    return _anonymous(answers, node)


@pytest.mark.jvm
@pytest.mark.kafka
@pytest.mark.parametrize("scenario", [reassignments, elections])
async def test_answers_as_kafka(scenario: Any, kafka_broker: Any, gateway: Any) -> None:
    await compare(scenario, kafka_broker.bootstrap, kafka_bootstrap(gateway), scenario.__name__)


# -- Kafka's tools moving a partition between three gateways -------------------------------------------


def _leader(client: ck.Producer | ck.Consumer, topic: str) -> int:
    """The partition's leader as the client now sees it (asking refreshes its own metadata)."""
    return int(client.list_topics(topic, timeout=10).topics[topic].partitions[0].leader)


def _send(producer: ck.Producer, topic: str, values: list[bytes]) -> None:
    errors: list[object] = []
    for v in values:
        producer.produce(topic, value=v, on_delivery=lambda err, _msg: err is not None and errors.append(err))
    assert producer.flush(20) == 0 and not errors, errors


def _receive(consumer: ck.Consumer, count: int) -> list[bytes]:
    out: list[bytes] = []
    while len(out) < count:
        msg = consumer.poll(20)
        assert msg is not None, f"only {len(out)} of {count} records came"
        assert msg.error() is None, msg.error()
        out.append(msg.value())
    return out


@pytest.mark.jvm
@pytest.mark.kafka
async def test_kafka_tools_move_a_partition_between_gateways(redis_url: str, tmp_path: Path) -> None:
    """--execute moves the leader, the clients follow with nothing lost, --verify reports it done; when
    the new leader stops, its second replica leads, and stays leading when the first returns, until
    kafka-leader-election --election-type PREFERRED moves it back."""
    topic = "moves"
    async with contextlib.AsyncExitStack() as stack:
        gws = {n: await stack.enter_async_context(running_gateway(test_config(redis_url, node_id=n)))
               for n in (1, 2, 3)}
        bs = ",".join(kafka_bootstrap(g) for g in gws.values())

        async def all_live() -> None:
            await eventually(lambda: all(len(g.services.registry.live()) == 3 for g in gws.values()), 20, "three live")

        await all_live()
        await create_topic(bs, topic)
        producer = ck.Producer({"bootstrap.servers": bs, "linger.ms": 5})
        consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": "unused", "enable.auto.commit": False})
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        sent: list[bytes] = []

        async def round_trip(tag: str) -> None:
            values = [f"{tag}-{i}".encode() for i in range(50)]
            await asyncio.to_thread(_send, producer, topic, values)
            sent.extend(values)
            assert await asyncio.to_thread(_receive, consumer, len(values)) == values

        async def led_by(node: int) -> None:
            """Every gateway names `node` the leader, and so do both clients."""
            async def agreed() -> bool:
                return ({g.services.registry.leader(topic, 0).node_id for g in gws.values()} == {node}
                        and await asyncio.to_thread(_leader, producer, topic) == node
                        and await asyncio.to_thread(_leader, consumer, topic) == node)
            await eventually(agreed, 20, f"node {node} leading")

        await round_trip("before")
        first = gws[1].services.registry.leader(topic, 0).node_id
        target, second = [n for n in gws if n != first]
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": [target, second]}]}))
        tool = ["kafka-reassign-partitions", "--bootstrap-server", bs, "--reassignment-json-file", str(plan)]
        moving = tmp_path / "topics.json"
        moving.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
        generated, executed, verified, listed = await tools(
            [*tool[:3], "--topics-to-move-json-file", str(moving), "--broker-list", "1,2,3", "--generate"],
            [*tool, "--execute"], [*tool, "--verify"], [*tool[:3], "--list"])
        assert generated.exit == 0 and "Proposed partition reassignment configuration" in generated.out, generated.out
        assert listed.exit == 0 and "No partition reassignments found." in listed.out, listed.out
        assert executed.exit == 0 and "Successfully started partition reassignment" in executed.out, executed.out
        assert verified.exit == 0 and f"Reassignment of partition {topic}-0 is completed." in verified.out, verified.out
        await led_by(target)
        await round_trip("moved")

        await gws.pop(target).stop()  # the preferred gateway stops: its second replica takes over
        bs = ",".join(kafka_bootstrap(g) for g in gws.values())
        await led_by(second)
        await round_trip("failed-over")
        election = ["kafka-leader-election", "--bootstrap-server", bs, "--election-type", "PREFERRED", "--topic", topic,
                    "--partition", "0"]
        (unavailable,) = await tools(election)
        assert "PreferredLeaderNotAvailableException" in unavailable.out, unavailable.out

        gws[target] = await stack.enter_async_context(running_gateway(test_config(redis_url, node_id=target)))
        await all_live()
        assert {g.services.registry.leader(topic, 0).node_id for g in gws.values()} == {second}
        bs = ",".join(kafka_bootstrap(g) for g in gws.values())
        elected, again = await tools([*election[:2], bs, *election[3:]], [*election[:2], bs, *election[3:]])
        assert elected.exit == 0 and f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" \
            in elected.out, elected.out
        assert f"Valid replica already elected for partitions {topic}-0" in again.out, again.out
        await led_by(target)
        await round_trip("elected")

        producer.flush(10)
        consumer.close()
        fresh = ck.Consumer({"bootstrap.servers": bs, "group.id": "unused", "enable.auto.commit": False})
        fresh.assign([ck.TopicPartition(topic, 0, 0)])
        try:
            assert await asyncio.to_thread(_receive, fresh, len(sent)) == sent  # the whole log, in order
        finally:
            fresh.close()
        await gws[second].services.log.delete_topic(topic)  # its placement goes with it
        await create_topic(bs, topic)
        assert (await gws[second].services.registry.store.placements()) == {}


async def test_a_stale_leadership_change_loses(store: Store) -> None:
    """Two gateways failing a partition over at once from the same view: one script call wins, and the
    other, expecting what is no longer stored, changes nothing."""
    key, placed = ("orders", 0), Placement(1, (1, 2, 3))
    assert await store.registry.place([(key, None, placed)]) == [True]
    to_two, to_three = Placement(2, (1, 2, 3)), Placement(3, (1, 2, 3))
    assert await store.registry.place([(key, placed, to_two), (key, placed, to_three)]) == [True, False]
    assert await store.registry.place([(key, None, placed)]) == [False]  # "none stored" no longer holds
    assert await store.registry.placements() == {key: to_two}
    assert await store.registry.place([(key, None, None)], expect=False) == [True]
    assert await store.registry.placements() == {}
