"""The differential corpus (issue 29): each scenario runs against the real Kafka 4.4 broker and the
gateway, with the same fresh topic and group names, and what a client observes must be the same on
both once tests/kafka_differences.py has set aside what must differ and what differs on purpose.

Scenarios are data: `SCENARIOS` maps a name to an async function of a `Side` and a fresh name, and
the families (one API at each version both brokers serve) are generated from tables below, so the
count is the number of test ids.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kio.static.primitive import Records

from gateway.formats.records import BatchBuilder, build_batch
from tests.conftest import eventually, flush, kafka_bootstrap, running_gateway, test_config
from tests.differential import Scenario, Side, compare, coordinators_ready, side
from tests.kafka_differences import (
    ALLOWED,
    ANSWERS_INSTEAD_OF_CLOSING,
    BEHIND_A_REFUSAL,
    CLIENT_TELEMETRY,
    FIRST_SEQUENCE,
    FOUND,
    INTERNAL_TOPICS,
    LATE_END_TXN,
    LATE_INIT_PRODUCER_ID,
    LATE_TXN_JOIN,
    LATE_TXN_OFFSET_COMMIT,
    MIN_INSYNC,
    OWN_TOPIC_CONFIGS,
    REMOTE_READ_FAILURE,
    UNCAPPED_MIN_INSYNC,
    WIRE_FOUND,
    found,
)

pytestmark = [pytest.mark.jvm, pytest.mark.kafka]

SCENARIOS: dict[str, Scenario] = {}
# record timestamps the scenarios choose, so both logs hold the same ones: an hour ago, well inside
# Kafka's 7-day retention (older records are deleted by its retention check minutes into a run)
T0 = (time.time_ns() // 1_000_000_000 - 3600) * 1000


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def family(name: str, versions: range, make: Callable[[int], Scenario]) -> None:
    """One scenario per version of an API: `make(version)`."""
    for v in versions:
        SCENARIOS[f"{name}_v{v}"] = make(v)


# -- building blocks, each one request both brokers must answer alike --------------------------------


async def create(s: Side, topic: str, partitions: int = 1, configs: dict[str, str] | None = None) -> Any:
    resp = await s.call(19, 7, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                                            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                                "timeout": 10_000})
    assert resp["topics"][0]["error_code"] == 0, resp
    await serving(s, topic, partitions)
    return resp


async def serving(s: Side, topic: str, partitions: int) -> None:
    """Await every partition of `topic` having a leader: Kafka answers CreateTopics before its broker
    has learnt of the new partitions from the controller."""
    async def led() -> bool:
        meta = await s.call(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        parts = meta["topics"][0]["partitions"]
        return len(parts) == partitions and all(p["error_code"] == 0 for p in parts)

    await eventually(led, 30, f"{topic}'s partitions led")
    # ListOffsets is the last to learn of them
    await eventually(lambda: _listed(s, topic, partitions), 30, f"{topic}'s offsets")


async def _listed(s: Side, topic: str, partitions: int) -> bool:
    resp = await s.call(2, 7, {"replica_id": -1, "topics": [{"name": topic, "partitions": [
        {"partition_index": p, "timestamp": -1, "current_leader_epoch": -1} for p in range(partitions)]}]})
    return all(p["error_code"] == 0 for p in resp["topics"][0]["partitions"])


def batch(n: int, start: int = 0, at: int = T0) -> Records:
    """n records with keys and values from `start`, timestamped `at`."""
    return Records(build_batch([(b"k%d" % i, b"v%d" % i, []) for i in range(start, start + n)], timestamp=at))


async def produce(s: Side, topic: str, partition: int = 0, n: int = 3, start: int = 0, at: int = T0,
                  version: int = 9, acks: int = -1) -> Any:
    return await s.call(0, version, {"acks": acks, "timeout": 10_000, "topic_data": [
        {"name": topic, "topic_id": await s.topic_id(topic) if version >= 13 else None,
         "partition_data": [{"index": partition, "records": batch(n, start, at)}]}]})


async def list_offsets(s: Side, topic: str, timestamp: int, version: int = 10, partition: int = 0,
                       isolation: int = 0) -> Any:
    return await s.call(2, version, {"replica_id": -1, "isolation_level": isolation, "timeout": 10_000, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp,
                                        "current_leader_epoch": -1}]}]})


async def fetch(s: Side, topic: str, offset: int = 0, version: int = 12, partition: int = 0,
                isolation: int = 0, max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20,
                leader_epoch: int = -1) -> Any:
    return await s.call(1, version, {
        "replica_id": -1, "replica_state": {"replica_id": -1, "replica_epoch": -1}, "max_wait": 0, "min_bytes": 0,
        "max_bytes": max_bytes, "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "topic_id": await s.topic_id(topic) if version >= 13 else None,
                    "partitions": [{"partition": partition, "fetch_offset": offset,
                                    "current_leader_epoch": leader_epoch, "last_fetched_epoch": -1,
                                    "log_start_offset": -1, "partition_max_bytes": partition_max_bytes}]}],
        "rack_id": ""})


async def describe_configs(s: Side, topic: str, keys: list[str] | None, version: int = 4,
                           synonyms: bool = True) -> Any:
    return await s.call(32, version, {"resources": [{"resource_type": 2, "resource_name": topic,
                                                     "configuration_keys": keys}],
                                      "include_synonyms": synonyms})


# -- ApiVersions, Metadata ------------------------------------------------------------------------------

family("api_versions", range(0, 5), lambda v: lambda s, name: s.call(18, v, {
    "client_software_name": "differential", "client_software_version": "1"}))


def _api_versions_software(name: str, version: str) -> Scenario:
    async def run(s: Side, _: str) -> Any:
        answer = await s.call(18, 3, {"client_software_name": name, "client_software_version": version})
        return [answer["error_code"], len(answer["api_keys"]) > 0]
    return run


for _case, (_name, _version) in {"empty_name": ("", "1"), "bad_name": ("my client", "1"),
                                 "bad_version": ("client", "1.0-"), "dotted": ("a.b-c", "1.2.3-rc1")}.items():
    SCENARIOS[f"api_versions_software_{_case}"] = _api_versions_software(_name, _version)


def _describe_cluster(v: int) -> Scenario:
    async def run(s: Side, _: str) -> Any:
        return [await s.call(60, v, {"endpoint_type": endpoint, "include_cluster_authorized_operations": True})
                for endpoint in (1, 2, 0, 7)]
    return run


family("describe_cluster", range(0, 3), _describe_cluster)


def _metadata(v: int) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        await create(s, name, 3)
        return await s.call(3, v, {"topics": [{"name": name}], "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": True})
    return run


def _metadata_unknown(v: int) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        return await s.call(3, v, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
    return run


family("metadata_topic", range(0, 14), _metadata)
family("metadata_unknown_topic", range(4, 14), _metadata_unknown)


@scenario
async def metadata_invalid_topic_name(s: Side, name: str) -> Any:
    return await s.call(3, 12, {"topics": [{"name": "bad name!"}], "allow_auto_topic_creation": False})


@scenario
async def metadata_topic_ids(s: Side, name: str) -> Any:
    """By id beside a name (v12: the id alone counts), an id no topic has, an id before v12 (the whole
    request refused), and the operations on a topic that is not there."""
    await create(s, name, 1)
    known, none = await s.topic_id(name), uuid.UUID(int=0)
    ask = [[{"name": None, "topic_id": known}, {"name": name + "-other", "topic_id": none}],
           [{"name": name, "topic_id": uuid.UUID(int=42)}]]
    unknown = await s.call(3, 12, {"topics": [{"name": name + "-absent", "topic_id": none}, {"name": "bad name!"}],
                                   "allow_auto_topic_creation": False, "include_topic_authorized_operations": True})
    unknown["topics"].sort(key=lambda t: t["name"])  # Kafka answers in its own set's order
    return [*[await s.call(3, 12, {"topics": t, "allow_auto_topic_creation": False}) for t in ask],
            await s.call(3, 11, {"topics": [{"name": name, "topic_id": known}], "allow_auto_topic_creation": False}),
            unknown]


@scenario
async def describe_topic_partitions_paging(s: Side, name: str) -> Any:
    """Limits of 0 and below, a cursor within a topic, a negative cursor partition, an unknown topic."""
    await create(s, name, 3)
    topics = [{"name": name}, {"name": name + "-absent"}]
    pages = [(0, None), (-5, None), (2, {"topic_name": name, "partition_index": 1}),
             (1, {"topic_name": name, "partition_index": -1})]
    return [await s.call(75, 0, {"topics": topics, "response_partition_limit": limit, "cursor": cursor})
            for limit, cursor in pages]


# -- Produce ----------------------------------------------------------------------------------------------


def _produce(v: int) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        await create(s, name, 2)
        return [await produce(s, name, 0, 3, version=v), await produce(s, name, 0, 2, 3, version=v),
                await produce(s, name, 1, 1, version=v)]
    return run


family("produce", range(3, 14), _produce)


@scenario
async def produce_unknown_topic(s: Side, name: str) -> Any:
    return await s.call(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": name, "partition_data": [{"index": 0, "records": batch(1)}]}]})


@scenario
async def produce_partition_out_of_range(s: Side, name: str) -> Any:
    await create(s, name, 1)
    return await produce(s, name, partition=5)


@scenario
async def produce_invalid_acks(s: Side, name: str) -> Any:
    await create(s, name, 1)
    return await produce(s, name, acks=2)


@scenario
async def produce_acks_1(s: Side, name: str) -> Any:
    await create(s, name, 1)
    return await produce(s, name, acks=1)


# -- ListOffsets: latest, earliest, max timestamp, by timestamp --------------------------------------------


def _list_offsets(v: int, timestamp: int) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        await create(s, name, 1)
        for i, at in enumerate((T0, T0 + 2000, T0 + 1000)):
            await produce(s, name, 0, 2, 2 * i, at)
        return await list_offsets(s, name, timestamp, v)
    return run


for _ts, _label in ((-1, "latest"), (-2, "earliest"), (T0 + 500, "by_time"), (T0 + 5000, "after_last"),
                    (T0, "first_time")):
    family(f"list_offsets_{_label}", range(1, 11), lambda v, ts=_ts: _list_offsets(v, ts))
family("list_offsets_max_timestamp", range(7, 11), lambda v: _list_offsets(v, -3))


def _special_timestamps(v: int) -> Scenario:
    """Every special timestamp at one version, the ones the version predates included."""
    async def run(s: Side, name: str) -> Any:
        await create(s, name, 1)
        await produce(s, name, 0, 2)
        return [await list_offsets(s, name, ts, v) for ts in (-3, -4, -5, -6, -7)]
    return run


family("list_offsets_special", range(1, 11), _special_timestamps)


@scenario
async def list_offsets_empty_topic(s: Side, name: str) -> Any:
    await create(s, name, 1)
    return [await list_offsets(s, name, ts) for ts in (-1, -2, -3, T0)]


@scenario
async def list_offsets_unknown_partition(s: Side, name: str) -> Any:
    await create(s, name, 1)
    return await list_offsets(s, name, -1, partition=3)


@scenario
async def list_offsets_leader_epochs(s: Side, name: str) -> Any:
    """A client's idea of the leader epoch: none, the current one, an older and a newer one."""
    await create(s, name, 1)
    return [await s.call(2, 7, {"replica_id": -1, "topics": [{"name": name, "partitions": [
        {"partition_index": 0, "timestamp": -1, "current_leader_epoch": epoch}]}]}) for epoch in (-1, 0, -7, 5)]


@scenario
async def topics_named_without_partitions(s: Side, name: str) -> Any:
    """A topic named with no partitions in ListOffsets and Fetch: answered by partition, so absent."""
    await create(s, name, 1)
    listed = await s.call(2, 7, {"replica_id": -1, "topics": [{"name": name, "partitions": []}]})
    fetched = await s.call(1, 12, {"replica_id": -1, "max_bytes": 1000, "session_epoch": -1,
                                   "topics": [{"topic": name, "partitions": []}]})
    return [listed, fetched]


@scenario
async def list_offsets_unknown_topic(s: Side, name: str) -> Any:
    return await list_offsets(s, name, -1)


# -- Fetch --------------------------------------------------------------------------------------------------


def _fetch(v: int) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        await create(s, name, 1)
        await produce(s, name, 0, 3)
        await produce(s, name, 0, 2, 3)
        return [await fetch(s, name, 0, v), await fetch(s, name, 3, v), await fetch(s, name, 5, v)]
    return run


family("fetch", range(4, 18), _fetch)


@scenario
async def fetch_offset_out_of_range(s: Side, name: str) -> Any:
    await create(s, name, 1)
    await produce(s, name, 0, 2)
    return [await fetch(s, name, 10), await fetch(s, name, -5)]


@scenario
async def fetch_leader_epochs(s: Side, name: str) -> Any:
    """A newer leader epoch than the leader's (0 on both) is UNKNOWN_LEADER_EPOCH, checked before the
    offset; a negative one is none."""
    await create(s, name, 1)
    await produce(s, name, 0, 2)
    return [await fetch(s, name, offset, leader_epoch=epoch) for epoch in (3, 0, -5) for offset in (0, 10)]


@scenario
async def fetch_negative_limits(s: Side, name: str) -> Any:
    """A negative limit fails a partition with records to read (UNKNOWN_SERVER_ERROR), not one at
    its end or out of range; a negative request limit holds for the first partition only."""
    await create(s, name, 1)
    await produce(s, name, 0, 2)
    return [await fetch(s, name, offset, max_bytes=mb, partition_max_bytes=pmb)
            for mb, pmb in ((-1, 1000), (1000, -1), (0, 1000)) for offset in (0, 2, 10)]


@scenario
async def fetch_unknown_partition(s: Side, name: str) -> Any:
    await create(s, name, 1)
    return await fetch(s, name, 0, partition=4)


@scenario
async def fetch_unknown_topic_id(s: Side, name: str) -> Any:
    return await s.call(1, 13, {"replica_state": {"replica_id": -1, "replica_epoch": -1}, "max_bytes": 1 << 20,
                                "session_epoch": -1, "topics": [{"topic_id": uuid.UUID(int=7), "partitions": [
                                    {"partition": 0, "partition_max_bytes": 1000, "current_leader_epoch": -1,
                                     "last_fetched_epoch": -1, "log_start_offset": -1}]}]})


# -- DeleteRecords, log start -------------------------------------------------------------------------------


def _delete_records(offset: int) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        await create(s, name, 1)
        await produce(s, name, 0, 3)
        await produce(s, name, 0, 3, 3)
        deleted = await s.call(21, 2, {"timeout": 10_000, "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "offset": offset}]}]})
        return [deleted, await list_offsets(s, name, -2), await list_offsets(s, name, -1), await fetch(s, name, 0)]
    return run


for _off in (0, 2, 3, 6, -1, 7):
    SCENARIOS[f"delete_records_to_{_off}".replace("-", "minus_")] = _delete_records(_off)


def _delete_records_version(v: int) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        await create(s, name, 2)
        await produce(s, name, 0, 4)
        deleted = await s.call(21, v, {"timeout": 10_000, "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "offset": 2}, {"partition_index": 7, "offset": 0}]},
            {"name": name + "-absent", "partitions": [{"partition_index": 0, "offset": 0}]}]})
        deleted["topics"].sort(key=lambda t: t["name"])  # Kafka answers in its own map's order
        for t in deleted["topics"]:
            t["partitions"].sort(key=lambda p: p["partition_index"])
        return deleted
    return run


family("delete_records", range(0, 3), _delete_records_version)


# -- CreateTopics validation ------------------------------------------------------------------------------

CREATE_CASES: dict[str, Callable[[str], dict[str, Any]]] = {
    "ok": lambda n: {"name": n, "num_partitions": 2, "replication_factor": 1},
    "defaults": lambda n: {"name": n, "num_partitions": -1, "replication_factor": -1},
    "dot": lambda n: {"name": ".", "num_partitions": 1, "replication_factor": 1},
    "dotdot": lambda n: {"name": "..", "num_partitions": 1, "replication_factor": 1},
    "slash": lambda n: {"name": n + "/x", "num_partitions": 1, "replication_factor": 1},
    "space": lambda n: {"name": n + " x", "num_partitions": 1, "replication_factor": 1},
    "too_long": lambda n: {"name": n + "x" * 250, "num_partitions": 1, "replication_factor": 1},
    "empty_name": lambda n: {"name": "", "num_partitions": 1, "replication_factor": 1},
    "zero_partitions": lambda n: {"name": n, "num_partitions": 0, "replication_factor": 1},
    "negative_partitions": lambda n: {"name": n, "num_partitions": -5, "replication_factor": 1},
    "replication_factor_2": lambda n: {"name": n, "num_partitions": 1, "replication_factor": 2},
    "replication_factor_0": lambda n: {"name": n, "num_partitions": 1, "replication_factor": 0},
    "unknown_config": lambda n: {"name": n, "num_partitions": 1, "replication_factor": 1,
                                 "configs": [{"name": "no.such.config", "value": "1"}]},
    "bad_cleanup_policy": lambda n: {"name": n, "num_partitions": 1, "replication_factor": 1,
                                     "configs": [{"name": "cleanup.policy", "value": "bogus"}]},
    "bad_retention_ms": lambda n: {"name": n, "num_partitions": 1, "replication_factor": 1,
                                   "configs": [{"name": "retention.ms", "value": "abc"}]},
    "null_config_value": lambda n: {"name": n, "num_partitions": 1, "replication_factor": 1,
                                    "configs": [{"name": "retention.ms", "value": None}]},
    "good_configs": lambda n: {"name": n, "num_partitions": 1, "replication_factor": 1,
                               "configs": [{"name": "retention.ms", "value": "3600000"},
                                           {"name": "cleanup.policy", "value": "compact"}]},
    "assignments": lambda n: {"name": n, "num_partitions": -1, "replication_factor": -1,
                              "assignments": [{"partition_index": 0, "broker_ids": []}]},
    # tiered storage is off on both (the gateway's without --tier-store): refused with Kafka's words
    "remote_storage": lambda n: {"name": n, "num_partitions": 1, "replication_factor": 1,
                                 "configs": [{"name": "remote.storage.enable", "value": "true"},
                                             {"name": "cleanup.policy", "value": "compact"}]},
    # local retention is checked against retention only where remote storage is on
    "local_retention": lambda n: {"name": n, "num_partitions": 1, "replication_factor": 1,
                                  "configs": [{"name": "local.retention.ms", "value": "-1"},
                                              {"name": "local.retention.bytes", "value": "5000"},
                                              {"name": "retention.bytes", "value": "1000"},
                                              {"name": "remote.copy.lag.ms", "value": "-1"}]},
}


def _create_topics(case: Callable[[str], dict[str, Any]], version: int, validate_only: bool) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        topic = case(name)
        if topic.get("assignments"):  # onto this broker's own node
            node = (await s.call(3, 12, {"topics": []}))["brokers"][0]["node_id"]
            topic["assignments"] = [{**a, "broker_ids": [node]} for a in topic["assignments"]]
        return await s.call(19, version, {"topics": [topic], "timeout": 10_000, "validate_only": validate_only})
    return run


for _case, _make in CREATE_CASES.items():
    SCENARIOS[f"create_topics_{_case}"] = _create_topics(_make, 7, False)
    SCENARIOS[f"create_topics_{_case}_validate_only"] = _create_topics(_make, 7, True)
family("create_topics", range(2, 8), lambda v: _create_topics(CREATE_CASES["good_configs"], v, False))


@scenario
async def create_topics_already_exists(s: Side, name: str) -> Any:
    await create(s, name, 1)
    return await s.call(19, 7, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}],
                                "timeout": 10_000})


@scenario
async def create_topics_duplicate_in_request(s: Side, name: str) -> Any:
    return await s.call(19, 7, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}] * 2,
                                "timeout": 10_000})


# -- CreatePartitions, DeleteTopics ---------------------------------------------------------------------


def _create_partitions(count: int, validate_only: bool, version: int = 3) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        await create(s, name, 2)
        grown = await s.call(37, version, {"topics": [{"name": name, "count": count, "assignments": None}],
                                           "timeout": 10_000, "validate_only": validate_only})
        if grown["results"][0]["error_code"] == 0 and not validate_only:
            await serving(s, name, count)  # Kafka's broker learns of new partitions a moment later
        meta = await s.call(3, 12, {"topics": [{"name": name}]})
        return [grown, len(meta["topics"][0]["partitions"])]
    return run


for _count in (4, 2, 1, 0):
    SCENARIOS[f"create_partitions_to_{_count}"] = _create_partitions(_count, False)
    SCENARIOS[f"create_partitions_to_{_count}_validate_only"] = _create_partitions(_count, True)
family("create_partitions", range(0, 4), lambda v: _create_partitions(3, False, v))


@scenario
async def create_partitions_unknown_topic(s: Side, name: str) -> Any:
    return await s.call(37, 3, {"topics": [{"name": name, "count": 3, "assignments": None}], "timeout": 10_000})


def _delete_topics(v: int) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        await create(s, name, 1)
        deleted = await s.call(20, v, {"topic_names": [name, name + "-absent"], "timeout": 10_000,
                                       "topics": [{"name": name}, {"name": name + "-absent"}]})
        deleted["responses"].sort(key=repr)  # Kafka answers in its own map's order
        return deleted
    return run


family("delete_topics", range(1, 7), _delete_topics)


# -- Configs ----------------------------------------------------------------------------------------------

TOPIC_CONFIGS = {"retention.ms": "86400000", "cleanup.policy": "compact", "max.message.bytes": "200000",
                 "segment.bytes": "10485760", "retention.bytes": "1000000"}
CONFIG_KEYS = ["retention.ms", "cleanup.policy", "max.message.bytes", "segment.bytes", "retention.bytes",
               "min.insync.replicas", "compression.type", "message.timestamp.type", "segment.ms",
               "delete.retention.ms", "min.compaction.lag.ms", "unclean.leader.election.enable"]


def _describe_configs(v: int, synonyms: bool) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        await create(s, name, 1, TOPIC_CONFIGS)
        return await describe_configs(s, name, CONFIG_KEYS, v, synonyms)
    return run


family("describe_configs", range(1, 5), lambda v: _describe_configs(v, False))  # v0 went in Kafka 4.0
family("describe_configs_synonyms", range(1, 5), lambda v: _describe_configs(v, True))


@scenario
async def describe_configs_all(s: Side, name: str) -> Any:
    """Every config of a topic, for no names (null) and an empty list alike, in Kafka's order."""
    await create(s, name, 1, TOPIC_CONFIGS)
    return [await describe_configs(s, name, keys) for keys in (None, [])]


@scenario
async def describe_configs_unknown_topic(s: Side, name: str) -> Any:
    return await describe_configs(s, name, None)


@scenario
async def describe_configs_resource_types(s: Side, name: str) -> Any:
    """Every resource type code, known or not, named for a topic that exists."""
    await create(s, name, 1)
    return [await s.call(32, 4, {"resources": [{"resource_type": t, "resource_name": name,
                                               "configuration_keys": ["retention.ms"]}]})
            for t in (0, 1, 3, 5, 7)]


@scenario
async def describe_configs_two_resources_one_name(s: Side, name: str) -> Any:
    await create(s, name, 1)
    described = await s.call(32, 4, {"resources": [
        {"resource_type": 2, "resource_name": name, "configuration_keys": ["retention.ms"]},
        {"resource_type": 0, "resource_name": name, "configuration_keys": []}]})
    described["results"].sort(key=lambda r: r["resource_type"])  # Kafka answers in its own order
    return described


@scenario
async def describe_configs_unknown_key(s: Side, name: str) -> Any:
    await create(s, name, 1)
    return await describe_configs(s, name, ["no.such.config", "retention.ms"])


def _alter(op: int, key: str, value: str | None, validate_only: bool = False) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        await create(s, name, 1, {"retention.ms": "86400000"})
        before = await _config_value(s, name, key)
        altered = await s.call(44, 1, {"validate_only": validate_only, "resources": [
            {"resource_type": 2, "resource_name": name,
             "configs": [{"name": key, "config_operation": op, "value": value}]}]})
        if altered["responses"][0]["error_code"] == 0 and not validate_only:
            await configs_settled(s, name, key, value if op == 0 else None, before)
        return [altered, await describe_configs(s, name, [key])]
    return run


async def _config_value(s: Side, topic: str, key: str) -> Any:
    configs = (await describe_configs(s, topic, [key]))["results"][0]["configs"]
    return next((c["value"] for c in configs), None)


for _name, _args in {
    "set_retention": (0, "retention.ms", "1000"),
    "set_retention_validate_only": (0, "retention.ms", "1000", True),
    "delete_retention": (1, "retention.ms", None),
    "append_cleanup_policy": (2, "cleanup.policy", "compact"),
    "subtract_cleanup_policy": (3, "cleanup.policy", "delete"),
    "set_bad_value": (0, "retention.ms", "soon"),
    "set_unknown": (0, "no.such.config", "1"),
    "bad_operation": (9, "retention.ms", "1"),
    "set_compression": (0, "compression.type", "zstd"),
    "set_bad_compression": (0, "compression.type", "rar"),
}.items():
    SCENARIOS[f"incremental_alter_configs_{_name}"] = _alter(*_args)


async def configs_settled(s: Side, topic: str, key: str, value: str | None, before: Any = None) -> None:
    """Await DescribeConfigs showing `key` set to `value` (None: no longer to `before`): Kafka's broker
    learns of altered configs from the metadata log a moment after the controller answers."""
    async def shown() -> bool:
        now = await _config_value(s, topic, key)
        return now == value if value is not None else now != before

    await eventually(shown, 30, f"{key}={value}")


@scenario
async def incremental_alter_configs_unknown_topic(s: Side, name: str) -> Any:
    return await s.call(44, 1, {"resources": [{"resource_type": 2, "resource_name": name, "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "1"}]}]})


@scenario
async def alter_configs_replaces_all(s: Side, name: str) -> Any:
    await create(s, name, 1, {"retention.ms": "86400000", "cleanup.policy": "compact"})
    altered = await s.call(33, 2, {"resources": [{"resource_type": 2, "resource_name": name, "configs": [
        {"name": "retention.bytes", "value": "5000"}]}]})
    if altered["responses"][0]["error_code"] == 0:  # the controller writes the whole set in one batch
        await configs_settled(s, name, "retention.bytes", "5000")
    return [altered, await describe_configs(s, name, ["retention.ms", "cleanup.policy", "retention.bytes"])]


# -- ACLs (the broker's StandardAuthorizer; every test client is a super user there, so what is compared
#    is what the ACL admin APIs answer) ----------------------------------------------------------------

ACL = {"resource_type": 2, "resource_name": "", "resource_pattern_type": 3, "principal": "User:alice",
       "host": "*", "operation": 3, "permission_type": 3}


def _acl_filter(name: str, **over: Any) -> dict[str, Any]:
    return {"resource_type_filter": 2, "resource_name_filter": name, "pattern_type_filter": 3,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1, **over}


def _acls(v: int) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        created = await s.call(30, v, {"creations": [
            {**ACL, "resource_name": name}, {**ACL, "resource_name": name, "operation": 2, "permission_type": 2},
            {**ACL, "resource_name": name + "-", "resource_pattern_type": 4}]})
        described = await acls_settled(s, v, _acl_filter(name), 2)
        deleted = await s.call(31, v, {"filters": [_acl_filter(name)]})
        for r in described["resources"]:
            r["acls"].sort(key=repr)  # a set: Kafka's order is its own
        for r in deleted["filter_results"]:
            r["matching_acls"].sort(key=repr)
        return [created, described, deleted, await acls_settled(s, v, _acl_filter(name), 0)]
    return run


async def acls_settled(s: Side, version: int, acl_filter: dict[str, Any], count: int) -> Any:
    """DescribeAcls once it shows `count` bindings: Kafka's authorizer learns of created and deleted
    ACLs from the metadata log a moment after CreateAcls and DeleteAcls answer."""
    async def described() -> Any:
        resp = await s.call(29, version, acl_filter)
        return resp if sum(len(r["acls"]) for r in resp["resources"]) == count else None

    return await eventually(described, 30, f"{count} ACLs")


family("acls", range(1, 4), _acls)

ACL_BAD = {
    "unknown_resource_type": {"resource_type": 0},
    "any_resource_type": {"resource_type": 1},
    "any_operation": {"operation": 1},
    "unknown_permission": {"permission_type": 0},
    "any_pattern": {"resource_pattern_type": 1},
    "match_pattern": {"resource_pattern_type": 2},
    "bad_principal": {"principal": "alice"},
    "empty_name": {"resource_name": ""},
    "cluster_bad_name": {"resource_type": 4, "resource_name": "not-kafka-cluster"},
    "cluster": {"resource_type": 4, "resource_name": "kafka-cluster", "operation": 4},
    "group": {"resource_type": 3},
    "transactional_id": {"resource_type": 5, "operation": 4},
    "deny_all_hosts": {"permission_type": 2, "operation": 2},
}


def _acl_create(over: dict[str, Any]) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        created = await s.call(30, 3, {"creations": [{**ACL, "resource_name": name, **over}]})
        ok = created != "closed" and created["results"][0]["error_code"] == 0
        described = await acls_settled(s, 3, _acl_filter(
            over.get("resource_name", name), resource_type_filter=1, pattern_type_filter=1), int(ok))
        await s.call(31, 3, {"filters": [_acl_filter(over.get("resource_name", name), resource_type_filter=1,
                                                     pattern_type_filter=1)]})
        return [created, described]
    return run


for _case, _over in ACL_BAD.items():
    SCENARIOS[f"create_acls_{_case}"] = _acl_create(_over)


@scenario
async def describe_acls_bad_filter(s: Side, name: str) -> Any:
    return [await s.call(29, 3, _acl_filter(name, operation=0)),
            await s.call(29, 3, _acl_filter(name, pattern_type_filter=0))]


# -- classic groups ----------------------------------------------------------------------------------------


def _find_coordinator(v: int, key_type: int) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        return await s.call(10, v, {"key": name, "key_type": key_type, "coordinator_keys": [name]})
    return run


family("find_coordinator_group", range(0, 7), lambda v: _find_coordinator(v, 0))
family("find_coordinator_transaction", range(1, 7), lambda v: _find_coordinator(v, 1))


async def join(s: Side, group: str, member: str = "", version: int = 9) -> Any:
    return await s.call(11, version, {"group_id": group, "session_timeout": 30_000, "rebalance_timeout": 30_000,
                                      "member_id": member, "protocol_type": "consumer",
                                      "protocols": [{"name": "range", "metadata": b"\x00\x01"}]})


def _classic_group(v: int) -> Scenario:
    """A member's whole life in a classic group, at one JoinGroup version, with the group's state
    after each step (DescribeGroups)."""
    async def run(s: Side, name: str) -> Any:
        steps = [await s.call(15, 5, {"groups": [name]})]
        first = await join(s, name, version=v)
        steps.append(first)
        member = first["member_id"]
        if first["error_code"] == 79:  # MEMBER_ID_REQUIRED: join again with the id given
            steps.append(joined := await join(s, name, member, v))
            member = joined["member_id"]
        else:
            joined = first
        steps.append(await s.call(15, 5, {"groups": [name]}))
        steps.append(await s.call(14, 5, {"group_id": name, "generation_id": joined["generation_id"],
                                          "member_id": member, "protocol_type": "consumer", "protocol_name": "range",
                                          "assignments": [{"member_id": member, "assignment": b"\x00\x02"}]}))
        steps.append(await s.call(15, 5, {"groups": [name]}))
        steps.append(await s.call(12, 4, {"group_id": name, "generation_id": joined["generation_id"],
                                          "member_id": member}))
        steps.append(await s.call(12, 4, {"group_id": name, "generation_id": 99, "member_id": member}))
        steps.append(await s.call(13, 5, {"group_id": name, "members": [{"member_id": member}]}))
        steps.append(await s.call(15, 5, {"groups": [name]}))
        deleted = await s.call(42, 2, {"groups_names": [name, name + "-absent"]})
        deleted["results"].sort(key=lambda r: r["group_id"])  # Kafka answers in its own map's order
        steps.append(deleted)
        steps.append(await s.call(15, 5, {"groups": [name]}))
        return steps
    return run


family("classic_group_life", range(0, 10), _classic_group)


@scenario
async def heartbeat_unknown_group(s: Side, name: str) -> Any:
    return await s.call(12, 4, {"group_id": name, "generation_id": 1, "member_id": "nobody"})


@scenario
async def sync_group_unknown_member(s: Side, name: str) -> Any:
    return await s.call(14, 5, {"group_id": name, "generation_id": 1, "member_id": "nobody",
                                "protocol_type": "consumer", "protocol_name": "range"})


@scenario
async def join_group_empty_protocols(s: Side, name: str) -> Any:
    return await s.call(11, 9, {"group_id": name, "session_timeout": 30_000, "rebalance_timeout": 30_000,
                                "member_id": "", "protocol_type": "consumer", "protocols": []})


@scenario
async def join_group_bad_session_timeout(s: Side, name: str) -> Any:
    return await s.call(11, 9, {"group_id": name, "session_timeout": 1, "rebalance_timeout": 30_000,
                                "member_id": "", "protocol_type": "consumer",
                                "protocols": [{"name": "range", "metadata": b""}]})


@scenario
async def join_group_empty_group_id(s: Side, name: str) -> Any:
    return await join(s, "")


def _offsets(commit_v: int, make_topic: bool = True) -> Scenario:
    """Offsets committed outside any generation (as a standalone consumer does) and read back."""
    async def run(s: Side, name: str) -> Any:
        if make_topic:
            await create(s, name, 2)
        committed = await s.call(8, commit_v, {
            "group_id": name, "generation_id_or_member_epoch": -1, "member_id": "", "retention_time_ms": -1,
            "topics": [{"name": name, "topic_id": await s.topic_id(name) if commit_v >= 10 else None,
                        "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                                        "committed_metadata": "m"},
                                       {"partition_index": 1, "committed_offset": 0,
                                        "committed_leader_epoch": -1, "committed_metadata": None}]}]})
        fetched = await s.call(9, 7, {"group_id": name, "require_stable": True, "groups": [
            {"group_id": name, "topics": [{"name": name, "partition_indexes": [0, 1, 2]}]}],
            "topics": [{"name": name, "partition_indexes": [0, 1, 2]}]})
        return [committed, fetched]
    return run


family("offset_commit", range(2, 11), _offsets)


def _offset_fetch(v: int) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        await create(s, name, 1)
        await _offsets(8, False)(s, name)
        return await s.call(9, v, {"group_id": name, "require_stable": False,
                                   "topics": [{"name": name, "partition_indexes": [0, 1]}],
                                   "groups": [{"group_id": name, "member_epoch": -1, "topics": [
                                       {"name": name, "topic_id": await s.topic_id(name) if v >= 10 else None,
                                        "partition_indexes": [0, 1]}]}]})
    return run


family("offset_fetch", range(1, 11), _offset_fetch)


@scenario
async def offset_fetch_topic_without_partitions(s: Side, name: str) -> Any:
    await create(s, name, 1)
    topics = [{"name": name, "partition_indexes": []}, {"name": name + "-absent", "partition_indexes": [-1, 0]}]
    return [await s.call(9, 7, {"group_id": name, "topics": topics}),
            await s.call(9, 8, {"groups": [{"group_id": name, "topics": topics}]})]


@scenario
async def offset_commit_unknown_topic(s: Side, name: str) -> Any:
    return await s.call(8, 8, {"group_id": name, "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1}]}]})


@scenario
async def offset_commit_negative_offset(s: Side, name: str) -> Any:
    await create(s, name, 1)
    return await s.call(8, 8, {"group_id": name, "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "committed_offset": -7, "committed_leader_epoch": -1}]}]})


@scenario
async def offset_commit_wrong_generation(s: Side, name: str) -> Any:
    await create(s, name, 1)
    return await s.call(8, 8, {"group_id": name, "generation_id_or_member_epoch": 3, "member_id": "m", "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1}]}]})


@scenario
async def offset_delete(s: Side, name: str) -> Any:
    await create(s, name, 2)
    await _offsets(8, False)(s, name)
    deleted = await s.call(47, 0, {"group_id": name, "topics": [
        {"name": name, "partitions": [{"partition_index": 0}]}]})
    return [deleted, await s.call(9, 7, {"group_id": name, "topics": [{"name": name, "partition_indexes": [0, 1]}]})]


@scenario
async def offset_delete_unknown_group(s: Side, name: str) -> Any:
    return await s.call(47, 0, {"group_id": name, "topics": [{"name": name, "partitions": [{"partition_index": 0}]}]})


def _list_groups(v: int) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        await create(s, name, 1)
        await _offsets(8, False)(s, name)
        listed = await s.call(16, v, {"states_filter": ["Empty"], "types_filter": ["classic"]})
        return [g for g in listed["groups"] if g["group_id"] == name] + [listed["error_code"]]
    return run


family("list_groups", range(0, 6), _list_groups)


def _describe_groups(v: int) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        await create(s, name, 1)
        await _offsets(8, False)(s, name)
        return await s.call(15, v, {"groups": [name, name + "-absent"], "include_authorized_operations": True})
    return run


family("describe_groups", range(0, 7), _describe_groups)


# -- KIP-848 consumer groups, KIP-932 share groups ------------------------------------------------------


async def consumer_heartbeat(s: Side, group: str, topic: str, member: str = "", epoch: int = 0) -> Any:
    return await s.call(68, 1, {"group_id": group, "member_id": member or str(uuid.uuid4()), "member_epoch": epoch,
                                "rebalance_timeout": 30_000, "subscribed_topic_names": [topic],
                                "server_assignor": None, "topic_partitions": []})


@scenario
async def consumer_group_life(s: Side, name: str) -> Any:
    await create(s, name, 2)
    steps = [await s.call(69, 1, {"group_ids": [name]})]
    member = str(uuid.uuid4())
    joined = await consumer_heartbeat(s, name, name, member)
    steps += [joined, await s.call(69, 1, {"group_ids": [name]})]
    steps.append(await consumer_heartbeat(s, name, name, member, 7))  # a wrong epoch: FENCED_MEMBER_EPOCH
    steps.append(await consumer_heartbeat(s, name, name, member, -1))  # leaving
    steps.append(await s.call(69, 1, {"group_ids": [name]}))
    return steps


@scenario
async def consumer_group_heartbeat_bad_requests(s: Side, name: str) -> Any:
    return [await s.call(68, 1, {"group_id": name, "member_id": "", "member_epoch": 0}),
            await s.call(68, 1, {"group_id": "", "member_id": str(uuid.uuid4()), "member_epoch": 0}),
            await consumer_heartbeat(s, name, name, epoch=5),
            await s.call(68, 1, {"group_id": name, "member_id": str(uuid.uuid4()), "member_epoch": 0,
                                 "rebalance_timeout": 30_000, "subscribed_topic_names": [name],
                                 "server_assignor": "no-such-assignor"})]


@scenario
async def consumer_group_describe_unknown(s: Side, name: str) -> Any:
    return await s.call(69, 1, {"group_ids": [name], "include_authorized_operations": True})


@scenario
async def share_group_life(s: Side, name: str) -> Any:
    await create(s, name, 1)
    steps = [await s.call(77, 1, {"group_ids": [name]})]
    member = str(uuid.uuid4())
    joined = await s.call(76, 1, {"group_id": name, "member_id": member, "member_epoch": 0,
                                  "subscribed_topic_names": [name]})
    steps += [joined, await s.call(77, 1, {"group_ids": [name]})]
    steps.append(await s.call(76, 1, {"group_id": name, "member_id": member, "member_epoch": 9}))
    steps.append(await s.call(76, 1, {"group_id": name, "member_id": member, "member_epoch": -1}))
    steps.append(await s.call(77, 1, {"group_ids": [name]}))
    return steps


@scenario
async def share_group_heartbeat_bad_requests(s: Side, name: str) -> Any:
    return [await s.call(76, 1, {"group_id": name, "member_id": "", "member_epoch": 0,
                                 "subscribed_topic_names": [name]}),
            await s.call(76, 1, {"group_id": name, "member_id": str(uuid.uuid4()), "member_epoch": 0,
                                 "subscribed_topic_names": None}),
            await s.call(76, 1, {"group_id": name, "member_id": str(uuid.uuid4()), "member_epoch": 3,
                                 "subscribed_topic_names": [name]})]


@scenario
async def share_group_describe_unknown(s: Side, name: str) -> Any:
    return await s.call(77, 1, {"group_ids": [name]})


# -- transactions -----------------------------------------------------------------------------------------


def _init_producer_id(v: int, transactional: bool) -> Scenario:
    async def run(s: Side, name: str) -> Any:
        return await s.call(22, v, {"transactional_id": name if transactional else None,
                                    "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1})
    return run


family("init_producer_id_idempotent", range(0, 6), lambda v: _init_producer_id(v, False))
family("init_producer_id_transactional", range(0, 6), lambda v: _init_producer_id(v, True))


@scenario
async def init_producer_id_bad_timeout(s: Side, name: str) -> Any:
    return await s.call(22, 4, {"transactional_id": name, "transaction_timeout": 1 << 30, "producer_id": -1,
                                "producer_epoch": -1})


@scenario
async def init_producer_id_zero_timeout(s: Side, name: str) -> Any:
    return await s.call(22, 4, {"transactional_id": name, "transaction_timeout": 0, "producer_id": -1,
                                "producer_epoch": -1})


@scenario
async def init_producer_id_epoch_without_id(s: Side, name: str) -> Any:
    return [await s.call(22, 4, {"transactional_id": tid, "transaction_timeout": 60_000, "producer_id": pid,
                                 "producer_epoch": epoch})
            for tid in (name, None) for pid, epoch in ((-1, 3), (5, -1))]


@scenario
async def end_txn_unknown_producer(s: Side, name: str) -> Any:
    return await s.call(26, 3, {"transactional_id": name, "producer_id": 12345, "producer_epoch": 0,
                                "committed": True})


@scenario
async def add_partitions_to_txn_unknown_producer(s: Side, name: str) -> Any:
    await create(s, name, 1)
    return await s.call(24, 3, {"v3_and_below_transactional_id": name, "v3_and_below_producer_id": 999,
                                "v3_and_below_producer_epoch": 0,
                                "v3_and_below_topics": [{"name": name, "partitions": [0]}]})


@scenario
async def txn_offset_commit_generations(s: Side, name: str) -> Any:
    """The fence exactly-once consumers (Kafka Streams' exactly_once_v2) rely on, KIP-447: a
    transaction's offsets carry the committing consumer's group metadata, and a member or generation
    the group no longer has is refused, while none at all (generation -1) is taken; and the
    offsets stay unstable (UNSTABLE_OFFSET_COMMIT) to a require_stable OffsetFetch, the new owner's,
    until the transaction ends."""
    await create(s, name, 1)
    joined = await join(s, name)
    if joined["error_code"] == 79:  # MEMBER_ID_REQUIRED: join again with the id given
        joined = await join(s, name, joined["member_id"])
    member, generation = joined["member_id"], joined["generation_id"]
    await s.call(14, 5, {"group_id": name, "generation_id": generation, "member_id": member,
                         "protocol_type": "consumer", "protocol_name": "range",
                         "assignments": [{"member_id": member, "assignment": b""}]})
    producer = await s.call(22, 4, {"transactional_id": name, "transaction_timeout": 60_000, "producer_id": -1,
                                    "producer_epoch": -1})
    ids = {"transactional_id": name, "producer_id": producer["producer_id"],
           "producer_epoch": producer["producer_epoch"]}
    steps = [await s.call(25, 3, {**ids, "group_id": name})]
    for gen, who in ((generation + 1, member), (generation, "someone-else"), (generation, member), (-1, "")):
        steps.append(await s.call(28, 3, {**ids, "group_id": name, "generation_id": gen, "member_id": who,
                                          "group_instance_id": None, "topics": [{"name": name, "partitions": [
                                              {"partition_index": 0, "committed_offset": 1,
                                               "committed_leader_epoch": -1, "committed_metadata": ""}]}]}))
    # until the transaction ends, a reader that wants stable offsets is told to retry, and is
    # answered once its marker is written (after EndTxn answers, on Kafka)
    stable = {"group_id": name, "require_stable": True, "topics": [{"name": name, "partition_indexes": [0]}]}
    steps.append(await s.call(9, 7, stable))
    steps.append(await s.call(26, 3, {**ids, "committed": True}))

    async def settled() -> Any:
        fetched = await s.call(9, 7, stable)
        return fetched if fetched["topics"][0]["partitions"][0]["error_code"] == 0 else None

    steps.append(await eventually(settled, 30, "the transaction's offsets"))
    return steps


async def _offset_is(s: Side, topic: str, end: int) -> bool:
    resp = await list_offsets(s, topic, -1, isolation=1)
    return bool(resp["topics"][0]["partitions"][0]["offset"] == end)


async def _transactional_history(s: Side, name: str, outcomes: list[bool]) -> Any:
    """Transactions of three records each, committed or aborted in turn by confluent-kafka's producer,
    then what read_committed and read_uncommitted fetches and ListOffsets show."""
    import confluent_kafka as ck

    await create(s, name, 1)

    def work() -> None:
        p = ck.Producer({"bootstrap.servers": s.bootstrap, "transactional.id": name, "linger.ms": 0})
        p.init_transactions(20)
        for i, commit in enumerate(outcomes):
            p.begin_transaction()
            for j in range(3):
                p.produce(name, value=b"v%d-%d" % (i, j), key=b"k", timestamp=T0 + i)
            p.flush(20)
            (p.commit_transaction if commit else p.abort_transaction)(20)

    await asyncio.to_thread(work)
    # Kafka writes the markers after EndTxn answers: await the last stable offset reaching the end
    end = 4 * len(outcomes)
    await eventually(lambda: _offset_is(s, name, end), 30, "the transactions' markers")
    return [[await list_offsets(s, name, -1, isolation=isolation), await visible(s, name, isolation)]
            for isolation in (1, 0)]


async def visible(s: Side, topic: str, isolation: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """The records a consumer of partition 0 gets, fetching from offset 0 until it has reached the
    end (the last stable offset under read_committed), dropping control records and, under
    read_committed, the aborted transactions' records as Kafka's clients do: how much each fetch
    answers is each broker's own affair."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset, aborted = 0, set()
    while True:
        part = (await s.call(1, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": isolation,
            "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": offset, "current_leader_epoch": -1, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}))["responses"][0]["partitions"][0]
        assert part["error_code"] == 0, part
        aborted |= {(a["producer_id"], a["first_offset"]) for a in part["aborted_transactions"] or []}
        for batch in part["records"] or []:
            offset = batch["base_offset"] + batch["last_offset_delta"] + 1
            pid = batch["producer_id"]
            if batch["attributes"] & 0x20:  # control: a marker ends its producer's aborted range
                aborted = {(p, first) for p, first in aborted if p != pid or first > batch["base_offset"]}
                continue
            if isolation and batch["attributes"] & 0x10 and any(
                    p == pid and first <= batch["base_offset"] for p, first in aborted):
                continue
            out += [(r["offset"], r["key"], r["value"]) for r in batch["records"]]
        end = part["last_stable_offset"] if isolation else part["high_watermark"]
        if offset >= end:
            return out


for _pattern in ("c", "a", "ca", "ac", "cac", "aa"):
    SCENARIOS[f"transactions_{_pattern}"] = (
        lambda outcomes: lambda s, name: _transactional_history(s, name, outcomes))([c == "c" for c in _pattern])


@scenario
async def transaction_open_hides_records_under_read_committed(s: Side, name: str) -> Any:
    await create(s, name, 1)
    init = await s.call(22, 4, {"transactional_id": name, "transaction_timeout": 60_000, "producer_id": -1,
                                "producer_epoch": -1})
    coordinator = await s.call(10, 4, {"key_type": 1, "coordinator_keys": [name]})
    return [init, coordinator["coordinators"][0]["error_code"]]


async def write_txn_markers(s: Side, topic: str, producer_id: int, epoch: int, commit: bool) -> Any:
    return await s.call(27, 1, {"markers": [{"producer_id": producer_id, "producer_epoch": epoch,
                                             "transaction_result": commit, "coordinator_epoch": 0,
                                             "topics": [{"name": topic, "partition_indexes": [0]}]}]})


@scenario
async def txn_markers_without_a_transaction(s: Side, name: str) -> Any:
    """A marker for a producer with nothing open on the partition (`kafka-transactions abort` of a
    transaction that is not there) is appended all the same, and aborts no records."""
    await create(s, name, 1)
    await produce(s, name, 0, 2)
    marked = [await write_txn_markers(s, name, 4242, 0, commit) for commit in (False, True)]
    # the batches less their timestamps: a marker is stamped by each broker's clock
    read = [[(b["base_offset"], b["attributes"], b["producer_epoch"], [(r["key"], r["value"]) for r in b["records"]])
             for b in (await fetch(s, name, 0, isolation=isolation))["responses"][0]["partitions"][0]["records"]]
            for isolation in (1, 0)]
    return [marked, await list_offsets(s, name, -1), await list_offsets(s, name, -1, isolation=1), read]


@scenario
async def txn_markers_stale_epoch(s: Side, name: str) -> Any:
    """A marker of an epoch older than the producer's open transaction is INVALID_PRODUCER_EPOCH and
    writes nothing; the transaction's own ending still aborts it."""
    await create(s, name, 1)
    init = {"transactional_id": name, "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1}
    inits = [await s.call(22, 4, init), await s.call(22, 4, init)]  # the second bumps the epoch to 1
    pid, epoch = inits[-1]["producer_id"], inits[-1]["producer_epoch"]
    added = await s.call(24, 3, {"v3_and_below_transactional_id": name, "v3_and_below_producer_id": pid,
                                 "v3_and_below_producer_epoch": epoch,
                                 "v3_and_below_topics": [{"name": name, "partitions": [0]}]})
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
    for i in range(2):
        b.append(b"v%d" % i, b"k", [], T0)
    produced = await s.call(0, 9, {"transactional_id": name, "acks": -1, "timeout": 10_000, "topic_data": [
        {"name": name, "partition_data": [{"index": 0, "records": Records(b.build())}]}]})
    stale = await write_txn_markers(s, name, pid, epoch - 1, False)
    ended = await s.call(26, 3, {"transactional_id": name, "producer_id": pid, "producer_epoch": epoch,
                                 "committed": False})
    await eventually(lambda: _offset_is(s, name, 3), 30, "the transaction's marker")
    return [inits, added, produced, stale, ended, await list_offsets(s, name, -1),
            await visible(s, name, 1), await visible(s, name, 0)]


async def described_txn(s: Side, tid: str) -> Any:
    """DescribeTransactions of `tid`: (state, producer epoch, topics)."""
    answer = await s.call(65, 0, {"transactional_ids": [tid]})
    state = answer["transaction_states"][0]
    return state["transaction_state"], state["producer_epoch"], state["topics"]


async def txn_completed(s: Side, tid: str, state: str) -> None:
    """Kafka answers EndTxn before its markers: await the transaction's end."""
    async def done() -> bool:
        return bool((await described_txn(s, tid))[0] == state)

    await eventually(done, 30, state)


async def timed_out_producer_carries_on(s: Side, name: str, v2: bool = False) -> Any:
    """KIP-360 after the coordinator aborts a transaction past its timeout and fences its producer
    (TransactionCoordinator.abortTimedOutTransactions): InitProducerId presenting the fenced epoch
    carries on in the key's epoch when the abort kept it as the last (transaction.version 2,
    prepareAbortOrCommit), and is fenced when it did not (1, prepareFenceProducerEpoch clears it);
    presenting the current epoch bumps it and keeps it as the last (prepareIncrementProducerEpoch), so
    a retry of that InitProducerId is answered alike and an older epoch is fenced. Epochs are given as
    steps from the first; under V2 the produce adds its partition itself (Produce v12)."""
    await create(s, name, 1)
    init = {"transactional_id": name, "transaction_timeout": 1_000, "producer_id": -1, "producer_epoch": -1}
    first = await s.call(22, 5, init)
    pid, e = first["producer_id"], first["producer_epoch"]
    out: list[Any] = [first["error_code"]]
    if not v2:
        out.append(await s.call(24, 3, {"v3_and_below_transactional_id": name, "v3_and_below_producer_id": pid,
                                        "v3_and_below_producer_epoch": e,
                                        "v3_and_below_topics": [{"name": name, "partitions": [0]}]}))
    b = BatchBuilder(producer_id=pid, producer_epoch=e, base_sequence=0, transactional=True)
    b.append(b"timed out", b"k", [], T0)
    produced = await s.call(0, 12 if v2 else 9, {"transactional_id": name, "acks": -1, "timeout": 10_000,
                                                 "topic_data": [{"name": name, "partition_data": [
                                                     {"index": 0, "records": Records(b.build())}]}]})
    out.append(produced["responses"][0]["partition_responses"][0]["error_code"])
    await txn_completed(s, name, "CompleteAbort")
    for presented in (e, e, e + 1, e + 1, e, e + 2):
        got = await s.call(22, 5, {**init, "transaction_timeout": 60_000, "producer_id": pid,
                                   "producer_epoch": presented})
        out.append((presented - e, got["error_code"], got["producer_epoch"] - e if got["error_code"] == 0 else None))
    return out


SCENARIOS["timed_out_producer_carries_on"] = timed_out_producer_carries_on


@scenario
async def end_txn_of_a_transaction_never_begun(s: Side, name: str) -> Any:
    """What a producer hears when its AddPartitionsToTxn died with the coordinator's process before
    it was applied and it aborts the transaction it believes open (librdkafka sends that EndTxn
    when unsure whether a request arrived): INVALID_TXN_STATE, from Empty as from CompleteCommit
    (TransactionCoordinator.endTransaction), which librdkafka takes as fatal; ending a transaction
    again the way it ended is NONE."""
    await create(s, name, 1)
    init = await s.call(22, 4, {"transactional_id": name, "transaction_timeout": 60_000, "producer_id": -1,
                                "producer_epoch": -1})
    producer = {"transactional_id": name, "producer_id": init["producer_id"], "producer_epoch": init["producer_epoch"]}
    out = [await s.call(26, 3, {**producer, "committed": False})]
    out.append(await s.call(24, 3, {"v3_and_below_transactional_id": name,
                                    "v3_and_below_producer_id": init["producer_id"],
                                    "v3_and_below_producer_epoch": init["producer_epoch"],
                                    "v3_and_below_topics": [{"name": name, "partitions": [0]}]}))
    out.append(await s.call(26, 3, {**producer, "committed": True}))
    await txn_completed(s, name, "CompleteCommit")
    out += [await s.call(26, 3, {**producer, "committed": c}) for c in (False, True)]
    return out


async def txn_produce(s: Side, name: str, pid: int, epoch: int, seq: int, value: bytes, version: int = 9) -> Any:
    """The error code of one transactional batch of one record, produced to partition 0 of `name`."""
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
    b.append(value, b"k", [], T0)
    got = await s.call(0, version, {"transactional_id": name, "acks": -1, "timeout": 10_000, "topic_data": [
        {"name": name, "partition_data": [{"index": 0, "records": Records(b.build())}]}]})
    return got["responses"][0]["partition_responses"][0]["error_code"]


@scenario
async def late_transactional_produce_after_abort(s: Side, name: str) -> Any:
    """The hanging-transaction defence under transactions V1 (KIP-890 part 1): a produce that arrives
    after its transaction's abort, at the same epoch and with no AddPartitionsToTxn before it, is
    verified with the coordinator and refused, INVALID_TXN_STATE (TRANSACTION_ABORTABLE from Produce
    v11), opening nothing: read_committed reads nothing of it, and the last stable offset is not held
    back; once the epoch moved on, the old one is INVALID_PRODUCER_EPOCH."""
    await create(s, name, 1)
    init = await s.call(22, 4, {"transactional_id": name, "transaction_timeout": 60_000, "producer_id": -1,
                                "producer_epoch": -1})
    pid, e = init["producer_id"], init["producer_epoch"]
    ids = {"transactional_id": name, "producer_id": pid, "producer_epoch": e}

    async def produce_one(seq: int, value: bytes, version: int = 9) -> Any:
        return await txn_produce(s, name, pid, e, seq, value, version)

    out: list[Any] = [await s.call(24, 3, {"v3_and_below_transactional_id": name, "v3_and_below_producer_id": pid,
                                           "v3_and_below_producer_epoch": e,
                                           "v3_and_below_topics": [{"name": name, "partitions": [0]}]}),
                      await produce_one(0, b"aborted")]
    out.append(await s.call(26, 3, {**ids, "committed": False}))
    await txn_completed(s, name, "CompleteAbort")
    out += [await produce_one(1, b"late", version) for version in (3, 9, 10, 11)]
    out.append((await described_txn(s, name))[0])
    bumped = await s.call(22, 4, {**ids, "transaction_timeout": 60_000})  # the producer's epoch moves on
    out += [bumped["error_code"], bumped["producer_epoch"] - e, await produce_one(1, b"fenced")]
    await eventually(lambda: _offset_is(s, name, 2), 30, "the abort's marker")
    out += [await list_offsets(s, name, -1), await visible(s, name, 1)]
    return out



@scenario
async def transactional_produce_unverified_out_of_sequence(s: Side, name: str) -> Any:
    """A transactional batch on a partition where its producer has no transaction ongoing is verified
    with the coordinator before the log looks at its sequence (ReplicaManager.appendRecords, then
    UnifiedLog's checks): INVALID_TXN_STATE for a batch never added, out of sequence as in it, and
    for a late one after its transaction's abort, the resend of the aborted batch too, which the log
    would have taken for a duplicate."""
    await create(s, name, 1)
    init = await s.call(22, 4, {"transactional_id": name, "transaction_timeout": 60_000, "producer_id": -1,
                                "producer_epoch": -1})
    pid, e = init["producer_id"], init["producer_epoch"]
    out: list[Any] = [await txn_produce(s, name, pid, e, seq, b"never added") for seq in (3, 0)]
    out.append(await s.call(24, 3, {"v3_and_below_transactional_id": name, "v3_and_below_producer_id": pid,
                                    "v3_and_below_producer_epoch": e,
                                    "v3_and_below_topics": [{"name": name, "partitions": [0]}]}))
    out.append(await txn_produce(s, name, pid, e, 0, b"aborted"))
    out.append(await s.call(26, 3, {"transactional_id": name, "producer_id": pid, "producer_epoch": e,
                                    "committed": False}))
    await txn_completed(s, name, "CompleteAbort")
    out += [await txn_produce(s, name, pid, e, seq, b"late") for seq in (5, 0)]
    return out

@scenario
async def init_producer_id_of_another_producer(s: Side, name: str) -> Any:
    """InitProducerId presenting a producer id the transactional.id does not have, at its epoch and at
    another: fenced (TransactionCoordinator.handleInitProducerId's isValidProducerId)."""
    init = {"transactional_id": name, "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1}
    first = await s.call(22, 5, init)
    pid, e = first["producer_id"], first["producer_epoch"]
    return [first["error_code"]] + [
        (await s.call(22, 5, {**init, "producer_id": pid + 1000, "producer_epoch": epoch}))["error_code"]
        for epoch in (e, e + 1)]


# -- the test ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def kafka_bs(kafka_broker: Any) -> str:
    """The Kafka broker once its group and transaction coordinators serve: a fresh node creates their
    internal topics on the first FindCoordinator and answers COORDINATOR_NOT_AVAILABLE until then."""
    async with side("kafka", kafka_broker.bootstrap) as s:
        await coordinators_ready(s)
    return str(kafka_broker.bootstrap)


@pytest.fixture(scope="module")
async def gateway_bs(redis_server: str) -> Any:
    """One gateway for the whole corpus, over the suite's Redis: scenarios use fresh names, as they
    must on the Kafka broker, which they share too."""
    flush(redis_server)
    async with running_gateway(test_config(redis_server)) as gw:
        yield kafka_bootstrap(gw)


def test_the_corpus_is_large_enough() -> None:
    assert len(SCENARIOS) >= 150, len(SCENARIOS)


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=f"found, not yet fixed: {reason}"))
    if (reason := found(n)) else n for n in sorted(SCENARIOS)])
async def test_kafka_and_the_gateway_answer_alike(name: str, kafka_bs: str, gateway_bs: str) -> None:
    await compare(SCENARIOS[name], kafka_bs, gateway_bs, name.replace("_", "-")[:40])


def test_the_allowed_differences_are_the_documented_ones() -> None:
    """tests/kafka_differences.py mirrors docs/kafka-differences.md: every allowed difference is a
    row there, every open finding is listed there, and every finding names a scenario."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "kafka-differences.md").read_text()
    assert [a.doc for a in (*ALLOWED, INTERNAL_TOPICS, ANSWERS_INSTEAD_OF_CLOSING, OWN_TOPIC_CONFIGS, MIN_INSYNC,
                          CLIENT_TELEMETRY, REMOTE_READ_FAILURE, FIRST_SEQUENCE, BEHIND_A_REFUSAL,
                          UNCAPPED_MIN_INSYNC, LATE_END_TXN, LATE_INIT_PRODUCER_ID,
                          LATE_TXN_JOIN, LATE_TXN_OFFSET_COMMIT)
            if a.doc not in doc] == []
    assert [n for n in FOUND if f"`{n}`" not in doc] == []
    assert [what for what in WIRE_FOUND.values() if what not in doc] == []
    assert [n for n in FOUND if not any(s == n or s.startswith(f"{n}_v") for s in SCENARIOS)] == []


async def test_a_producer_unknown_to_a_partition_starts_at_sequence_zero_on_the_gateway_alone(
        kafka_bs: str, gateway_bs: str) -> None:
    """FIRST_SEQUENCE: an idempotent producer's first batch on a partition at sequence 3 is stored by
    Kafka (an unknown producer's state may have gone with retention) and refused out of order by the
    gateway, whose producer state never goes with retention: taken, it let a failover's lost first
    batches be reported delivered (lua/includes/producer.lua). At sequence 0 both store it."""
    answers = {}
    for name, bootstrap in (("kafka", kafka_bs), ("gateway", gateway_bs)):
        async with side(name, bootstrap) as s:
            topic = f"first-seq-{uuid.uuid4().hex[:8]}"
            created = await s.call(19, 4, {"topics": [{"name": topic, "num_partitions": 2, "replication_factor": 1}],
                                           "timeout": 10_000})
            assert created["topics"][0]["error_code"] == 0, created
            await serving(s, topic, 2)
            got = await s.call(22, 4, {"transactional_id": None, "transaction_timeout": 60_000,
                                       "producer_id": -1, "producer_epoch": -1})
            codes = []
            for partition, seq in ((0, 3), (1, 0)):
                b = BatchBuilder(producer_id=got["producer_id"], producer_epoch=got["producer_epoch"],
                                 base_sequence=seq)
                b.append(b"v", b"k", [], T0)
                resp = await s.call(0, 9, {"acks": -1, "timeout": 10_000, "topic_data": [
                    {"name": topic, "partition_data": [{"index": partition, "records": Records(b.build())}]}]})
                codes.append(resp["responses"][0]["partition_responses"][0]["error_code"])
            answers[name] = codes
    assert answers == {"kafka": [0, 0], "gateway": [45, 0]}  # 45: OUT_OF_ORDER_SEQUENCE_NUMBER


async def test_min_insync_replicas_above_the_replication_factor_is_capped_on_kafka_alone(
        kafka_bs: str, gateway_bs: str) -> None:
    """UNCAPPED_MIN_INSYNC: an acks=all produce to a topic of replication factor 1 with
    min.insync.replicas 2 is stored by Kafka (KIP-966's effective minimum, capped at the replica
    count) and refused NOT_ENOUGH_REPLICAS by the gateway on a Redis without replicas, whose
    min.insync.replicas counts Redis replicas. acks=1 is stored by both."""
    answers = {}
    for name, bootstrap in (("kafka", kafka_bs), ("gateway", gateway_bs)):
        async with side(name, bootstrap) as s:
            topic = f"uncapped-{uuid.uuid4().hex[:8]}"
            await create(s, topic, configs={"min.insync.replicas": "2"})
            codes = []
            for acks in (-1, 1):
                b = BatchBuilder()
                b.append(b"v", b"k", [], T0)
                resp = await s.call(0, 9, {"acks": acks, "timeout": 10_000, "topic_data": [
                    {"name": topic, "partition_data": [{"index": 0, "records": Records(b.build())}]}]})
                codes.append(resp["responses"][0]["partition_responses"][0]["error_code"])
            answers[name] = codes
    assert answers == {"kafka": [0, 0], "gateway": [19, 0]}  # 19: NOT_ENOUGH_REPLICAS
