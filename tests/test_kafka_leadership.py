"""Leadership moves (AlterPartitionReassignments, ListPartitionReassignments, ElectLeaders): their
answers compared with a real Kafka 4.4 broker where one node can show them (its own node id, and one
no broker has), then Kafka's own tools moving a partition's leader between gateways."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import kafka_bootstrap
from tests.differential import Side, compare

pytestmark = [pytest.mark.kafka]


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
@pytest.mark.parametrize("scenario", [reassignments, elections])
async def test_answers_as_kafka(scenario: Any, kafka_broker: Any, gateway: Any) -> None:
    await compare(scenario, kafka_broker.bootstrap, kafka_bootstrap(gateway), scenario.__name__)
