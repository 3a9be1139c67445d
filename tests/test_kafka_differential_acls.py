"""ACL decisions compared with Kafka (issue 29): the same bindings made on a real Kafka 4.4 broker
with a SASL_PLAINTEXT listener and StandardAuthorizer (tests/kafka_jvm.py's SaslKafkaBroker) and on a
gateway with authentication on, then what the ACL admin APIs list and what a client that logged in as
`alice` is answered, compared once normalised as the corpus of tests/test_kafka_differential.py is.

Each scenario starts from no ACLs at all (it deletes every binding as the super user `admin` and
awaits the authorizer's view of that), so wildcard bindings of one cannot leak into the next. What
is compared is what Kafka's `AuthHelper` and `KafkaApis` answer for each API (the error codes of
TOPIC_/GROUP_/TRANSACTIONAL_ID_/CLUSTER_AUTHORIZATION_FAILED, what is filtered out of a listing) and
what `StandardAuthorizer`/`AclControlManager` accept, match and delete.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kio.static.primitive import Records

from gateway.formats.records import BatchBuilder
from tests.conftest import eventually, flush, kafka_bootstrap, running_gateway, test_config
from tests.differential import Side, send
from tests.kafka_differences import differences, normalise, plain
from tests.kafka_jvm import SASL_MECHANISM, SASL_USERS, SaslKafkaBroker, allowed
from tests.kafka_wire import build_request
from tests.test_kafka_differential import T0, batch, create, join, serving

pytestmark = [pytest.mark.jvm, pytest.mark.kafka]

# Kafka's codes (AclOperation, ResourceType, PatternType, AclPermissionType)
ANY, TOPIC, GROUP, CLUSTER, TXN_ID = 1, 2, 3, 4, 5
MATCH, LITERAL, PREFIXED = 2, 3, 4
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 10, 11, 12
DENY, ALLOW = 2, 3
ALICE = "User:alice"


@dataclass
class Login(Side):
    """A Side whose connections log in with SCRAM-SHA-256 (KIP-152: SaslHandshake v1, then
    SaslAuthenticate), as a Java client with `security.protocol=SASL_PLAINTEXT` does."""

    user: str = ""

    async def connect(self) -> Any:
        conn = await super().connect()
        shake = plain(await send(conn, build_request(17, 1, {"mechanism": SASL_MECHANISM})))
        assert shake["error_code"] == 0, shake
        nonce = secrets.token_urlsafe(18)
        first_bare = f"n={self.user},r={nonce}"
        server_first = (await self._step(conn, f"n,,{first_bare}")).decode()
        attrs = dict(part.split("=", 1) for part in server_first.split(","))
        salted = hashlib.pbkdf2_hmac("sha256", SASL_USERS[self.user].encode(), base64.b64decode(attrs["s"]),
                                     int(attrs["i"]))
        client_key = hmac.new(salted, b"Client Key", "sha256").digest()
        without_proof = f"c=biws,r={attrs['r']}"
        auth = f"{first_bare},{server_first},{without_proof}".encode()
        signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
        await self._step(conn, f"{without_proof},p={proof}")
        return conn

    @staticmethod
    async def _step(conn: Any, message: str) -> bytes:
        answer = plain(await send(conn, build_request(36, 2, {"auth_bytes": message.encode()})))
        assert answer["error_code"] == 0, answer
        return bytes.fromhex(answer["auth_bytes"])


def acl(resource_type: int, name: str, operation: int, permission: int = ALLOW, pattern: int = LITERAL,
        principal: str = ALICE, host: str = "*") -> dict[str, Any]:
    return {"resource_type": resource_type, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": host, "operation": operation, "permission_type": permission}


def acl_filter(resource_type: int = ANY, name: str | None = None, pattern: int = ANY, principal: str | None = None,
               host: str | None = None, operation: int = ANY, permission: int = ANY) -> dict[str, Any]:
    return {"resource_type_filter": resource_type, "resource_name_filter": name, "pattern_type_filter": pattern,
            "principal_filter": principal, "host_filter": host, "operation": operation, "permission_type": permission}


EVERY = acl_filter()


def listed(described: Any) -> Any:
    """DescribeAcls' answer with its resources and their ACLs in one order: a set on both brokers."""
    if isinstance(described, dict) and "resources" in described:
        for r in described["resources"]:
            r["acls"].sort(key=repr)
        described["resources"].sort(key=repr)
    if isinstance(described, dict) and "filter_results" in described:
        for r in described["filter_results"]:
            r["matching_acls"].sort(key=repr)
    return described


@dataclass
class Pair:
    """One broker as a scenario sees it: `admin` (a super user) and `alice` logged in, and the
    number of bindings the scenario has made there."""

    admin: Login
    alice: Login
    count: int = 0

    async def settled(self) -> Any:
        """DescribeAcls of every binding once it lists as many as were made: Kafka's authorizer
        learns of created and deleted ACLs from the metadata log a moment after the answer."""
        async def described() -> Any:
            resp = await self.admin.call(29, 3, EVERY)
            return resp if sum(len(r["acls"]) for r in resp["resources"]) == self.count else None

        return listed(await eventually(described, 30, f"{self.count} ACLs"))

    async def grant(self, *acls: dict[str, Any]) -> Any:
        """Bindings made by the super user, awaited until the authorizer decides by them."""
        made = await self.admin.call(30, 3, {"creations": list(acls)})
        self.count += sum(r["error_code"] == 0 for r in made["results"])
        await self.settled()
        return made

    async def clean(self) -> None:
        await self.admin.call(31, 3, {"filters": [EVERY]})
        self.count = 0
        await self.settled()


PairScenario = Callable[[Pair, str], Awaitable[Any]]
SCENARIOS: dict[str, PairScenario] = {}


def scenario(fn: PairScenario) -> PairScenario:
    SCENARIOS[fn.__name__] = fn
    return fn


async def compare(fn: PairScenario, kafka_bs: str, gateway_bs: str, prefix: str) -> Any:
    """As tests/differential.py's `compare`, with two logged-in users on each broker."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    answers = []
    for who, bs in (("kafka", kafka_bs), ("gateway", gateway_bs)):
        pair = Pair(Login(who, bs, user="admin"), Login(who, bs, user="alice"))
        try:
            await pair.clean()
            answers.append(normalise(plain(await fn(pair, name))))
            await pair.clean()
        finally:
            await pair.admin.close()
            await pair.alice.close()
    diff = differences(*answers)
    assert not diff, "the gateway answers otherwise than Kafka 4.4:\n" + "\n".join(diff)
    return answers[0]


# -- the ACL admin APIs: what is accepted, matched, listed and deleted ------------------------------------


@scenario
async def describe_literal_filter(p: Pair, name: str) -> Any:
    await p.grant(acl(TOPIC, name, READ), acl(TOPIC, name, WRITE, DENY), acl(TOPIC, name[:6], READ, pattern=PREFIXED),
                  acl(TOPIC, "*", READ), acl(GROUP, name, READ))
    return listed(await p.admin.call(29, 3, acl_filter(TOPIC, name, LITERAL)))


@scenario
async def describe_match_filter(p: Pair, name: str) -> Any:
    await p.grant(acl(TOPIC, name, READ), acl(TOPIC, name[:6], READ, pattern=PREFIXED), acl(TOPIC, "*", WRITE),
                  acl(TOPIC, name + "x", READ), acl(TOPIC, name + "-", READ, pattern=PREFIXED), acl(GROUP, name, READ))
    return [listed(await p.admin.call(29, 3, acl_filter(TOPIC, name, MATCH))),
            listed(await p.admin.call(29, 3, acl_filter(ANY, name, MATCH))),
            listed(await p.admin.call(29, 3, acl_filter(TOPIC, None, MATCH)))]


@scenario
async def describe_any_pattern_filter(p: Pair, name: str) -> Any:
    await p.grant(acl(TOPIC, name, READ), acl(TOPIC, name, WRITE, pattern=PREFIXED), acl(TOPIC, name[:6], READ,
                                                                                        pattern=PREFIXED))
    return [listed(await p.admin.call(29, 3, acl_filter(TOPIC, name, ANY))),
            listed(await p.admin.call(29, 3, acl_filter(TOPIC, name, PREFIXED)))]


@scenario
async def describe_by_principal_host_operation(p: Pair, name: str) -> Any:
    await p.grant(acl(TOPIC, name, READ), acl(TOPIC, name, READ, principal="User:bob", host="10.0.0.7"),
                  acl(TOPIC, name, WRITE, DENY, principal="User:*"), acl(CLUSTER, "kafka-cluster", DESCRIBE))
    return [listed(await p.admin.call(29, 3, acl_filter(principal="User:*"))),
            listed(await p.admin.call(29, 3, acl_filter(principal="User:bob"))),
            listed(await p.admin.call(29, 3, acl_filter(host="10.0.0.7"))),
            listed(await p.admin.call(29, 3, acl_filter(host="*", operation=WRITE, permission=DENY))),
            listed(await p.admin.call(29, 3, acl_filter(CLUSTER)))]


@scenario
async def delete_with_filters(p: Pair, name: str) -> Any:
    await p.grant(acl(TOPIC, name, READ), acl(TOPIC, name[:6], WRITE, pattern=PREFIXED), acl(TOPIC, "*", DESCRIBE),
                  acl(TOPIC, name + "x", READ), acl(GROUP, name, READ))
    # two filters that both match one binding, and one that matches none
    deleted = listed(await p.admin.call(31, 3, {"filters": [acl_filter(TOPIC, name, MATCH),
                                                            acl_filter(TOPIC, name, LITERAL, operation=READ),
                                                            acl_filter(GROUP, "nothing")]}))
    p.count = 2
    return [deleted, await p.settled()]


@scenario
async def delete_by_principal_and_permission(p: Pair, name: str) -> Any:
    await p.grant(acl(TOPIC, name, READ), acl(TOPIC, name, READ, DENY), acl(TOPIC, name, READ, principal="User:bob"))
    deleted = listed(await p.admin.call(31, 3, {"filters": [acl_filter(principal=ALICE, permission=DENY)]}))
    p.count = 2
    return [deleted, await p.settled()]


@scenario
async def create_mixed_valid_and_invalid(p: Pair, name: str) -> Any:
    made = await p.grant(acl(TOPIC, name, READ), acl(TOPIC, name, ANY), acl(GROUP, name, WRITE, principal="User:*"))
    return [made, await p.settled()]


@scenario
async def create_with_an_empty_host(p: Pair, name: str) -> Any:
    return [await p.grant(acl(TOPIC, name, READ, host="")), await p.settled()]


@scenario
async def create_the_same_binding_twice(p: Pair, name: str) -> Any:
    await p.grant(acl(TOPIC, name, READ))
    again = await p.admin.call(30, 3, {"creations": [acl(TOPIC, name, READ), acl(TOPIC, name, READ)]})
    return [again, await p.settled()]


@scenario
async def acl_apis_without_the_right(p: Pair, name: str) -> Any:
    await p.grant(acl(TOPIC, name, ALL), acl(GROUP, "*", ALL))
    return [await p.alice.call(29, 3, EVERY),
            await p.alice.call(30, 3, {"creations": [acl(TOPIC, name, WRITE)]}),
            await p.alice.call(31, 3, {"filters": [EVERY]}),
            await p.settled()]


@scenario
async def acl_apis_with_cluster_describe_and_alter(p: Pair, name: str) -> Any:
    await p.grant(acl(CLUSTER, "kafka-cluster", DESCRIBE))
    described = listed(await p.alice.call(29, 3, EVERY))
    refused = await p.alice.call(30, 3, {"creations": [acl(TOPIC, name, WRITE)]})
    await p.grant(acl(CLUSTER, "kafka-cluster", ALTER))
    made = await p.alice.call(30, 3, {"creations": [acl(TOPIC, name, WRITE, principal="User:bob")]})
    p.count += 1
    return [described, refused, made, await p.settled()]


# -- Produce and Fetch -----------------------------------------------------------------------------------------


async def produce_as(s: Side, topic: str, partition: int = 0) -> Any:
    return await s.call(0, 9, {"acks": -1, "timeout": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch(1)}]}]})


async def fetch_as(s: Side, topic: str) -> Any:
    return await s.call(1, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})


@scenario
async def produce_decisions(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    out = [await produce_as(p.alice, name)]
    await p.grant(acl(TOPIC, name, WRITE))
    out.append(await produce_as(p.alice, name))
    await p.grant(acl(TOPIC, name[:6], WRITE, DENY, pattern=PREFIXED))
    out.append(await produce_as(p.alice, name))
    return out


@scenario
async def produce_deny_for_another_host_or_user(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    await p.grant(acl(TOPIC, name, WRITE, principal="User:*"), acl(TOPIC, name, WRITE, DENY, host="10.0.0.7"),
                  acl(TOPIC, name, WRITE, DENY, principal="User:bob"))
    allowed = await produce_as(p.alice, name)
    await p.grant(acl(TOPIC, name, WRITE, DENY, principal="User:*", host="127.0.0.1"))
    return [allowed, await produce_as(p.alice, name)]


@scenario
async def produce_by_wildcard_topic_and_all(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    await p.grant(acl(TOPIC, "*", ALL))
    allowed = await produce_as(p.alice, name)
    await p.grant(acl(TOPIC, name, ALL, DENY))
    return [allowed, await produce_as(p.alice, name)]


@scenario
async def produce_unknown_topic_and_partition(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    out = [await produce_as(p.alice, name + "-absent"), await produce_as(p.alice, name, 3)]
    await p.grant(acl(TOPIC, name, WRITE))
    return [*out, await produce_as(p.alice, name + "-absent"), await produce_as(p.alice, name, 3)]


@scenario
async def fetch_decisions(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    await produce_as(p.admin, name)
    out = [await fetch_as(p.alice, name)]
    await p.grant(acl(TOPIC, name, DESCRIBE))
    out.append(await fetch_as(p.alice, name))
    await p.grant(acl(TOPIC, name[:6], READ, pattern=PREFIXED))
    out.append(await fetch_as(p.alice, name))
    return out


# -- Metadata ----------------------------------------------------------------------------------------------


async def metadata_as(s: Side, topics: list[str] | None, auto_create: bool = False, version: int = 12) -> Any:
    return await s.call(3, version, {"topics": None if topics is None else [{"name": t} for t in topics],
                                     "allow_auto_topic_creation": auto_create,
                                     "include_topic_authorized_operations": True})


@scenario
async def metadata_lists_the_topics_one_may_describe(p: Pair, name: str) -> Any:
    for t in (f"{name}-a", f"{name}-b", f"{name}-c"):
        await create(p.admin, t, 1)
    await p.grant(acl(TOPIC, f"{name}-a", READ), acl(TOPIC, f"{name}-b", DESCRIBE_CONFIGS),
                  acl(TOPIC, name, DESCRIBE, pattern=PREFIXED), acl(TOPIC, f"{name}-c", DESCRIBE, DENY))
    everything = await metadata_as(p.alice, None)
    everything["topics"] = sorted((t for t in everything["topics"] if t["name"].startswith(name)), key=repr)
    return [everything, await metadata_as(p.alice, [f"{name}-a", f"{name}-b", f"{name}-c", f"{name}-absent"])]


@scenario
async def metadata_of_a_topic_one_may_not_describe(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    await p.grant(acl(TOPIC, name, WRITE, host="10.0.0.7"))
    return [await metadata_as(p.alice, [name, name + "-absent"]), await metadata_as(p.alice, [name], version=4)]


@scenario
async def metadata_auto_create_without_create(p: Pair, name: str) -> Any:
    await p.grant(acl(TOPIC, name, DESCRIBE))
    refused = await metadata_as(p.alice, [name], auto_create=True)
    await p.grant(acl(TOPIC, name, CREATE, DENY))
    return [refused, await metadata_as(p.alice, [name], auto_create=True)]


@scenario
async def metadata_auto_create_with_create(p: Pair, name: str) -> Any:
    """The topic is created; what the first answer says of it differs (AUTO_CREATED's row)."""
    await p.grant(acl(TOPIC, name, DESCRIBE), acl(TOPIC, name, CREATE))
    await metadata_as(p.alice, [name], auto_create=True)
    await serving(p.admin, name, 1)
    return await metadata_as(p.alice, [name])


AUTO_CREATED = allowed("A topic created on first use by Metadata (`allow_auto_topic_creation`, with CREATE on it)")


# -- topic admin ---------------------------------------------------------------------------------------------


async def create_as(s: Side, topic: str, validate_only: bool = False) -> Any:
    return await s.call(19, 7, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
                                "timeout": 10_000, "validate_only": validate_only})


@scenario
async def create_topics_decisions(p: Pair, name: str) -> Any:
    out = [await create_as(p.alice, name, True), await create_as(p.alice, name)]
    await p.grant(acl(TOPIC, name, CREATE))
    out.append(await create_as(p.alice, name, True))
    await p.grant(acl(CLUSTER, "kafka-cluster", CREATE))
    out.append(await create_as(p.alice, name + "-c", True))
    return out


@scenario
async def create_topics_without_describe_configs(p: Pair, name: str) -> Any:
    """CreateTopics answers a new topic's configs only to one who may describe them (KafkaApis'
    handleCreateTopicsRequest: TOPIC_AUTHORIZATION_FAILED in topic_config_error_code)."""
    await p.grant(acl(TOPIC, name, CREATE))
    made = await create_as(p.alice, name)
    for t in made["topics"]:
        t["configs"] = None if t["configs"] is None else len(t["configs"]) > 0
    return made


@scenario
async def delete_topics_decisions(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    delete = {"topics": [{"name": name}, {"name": name + "-absent"}], "timeout": 10_000}
    out = [await p.alice.call(20, 6, delete)]
    await p.grant(acl(TOPIC, name, DESCRIBE), acl(TOPIC, name + "-absent", DESCRIBE))
    out.append(await p.alice.call(20, 6, delete))
    await p.grant(acl(TOPIC, name, DELETE), acl(TOPIC, name + "-absent", DELETE))
    out.append(await p.alice.call(20, 6, delete))
    for answer in out:
        answer["responses"].sort(key=lambda r: r["name"])
    return out


@scenario
async def create_partitions_and_delete_records(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    grow = {"topics": [{"name": name, "count": 2, "assignments": None}], "timeout": 10_000, "validate_only": True}
    trim = {"topics": [{"name": name, "partitions": [{"partition_index": 0, "offset": 0}]}], "timeout": 10_000}
    out = [await p.alice.call(37, 3, grow), await p.alice.call(21, 2, trim)]
    await p.grant(acl(TOPIC, name, ALTER), acl(TOPIC, name, DELETE))
    return [*out, await p.alice.call(37, 3, grow), await p.alice.call(21, 2, trim)]


# -- configs -------------------------------------------------------------------------------------------------


async def describe_topic_configs(s: Side, topic: str) -> Any:
    answer = await s.call(32, 4, {"resources": [{"resource_type": 2, "resource_name": topic,
                                                 "configuration_keys": ["retention.ms"]}]})
    return [(r["error_code"], r["resource_name"], [c["name"] for c in r["configs"]]) for r in answer["results"]]


async def alter_topic_config(s: Side, topic: str) -> Any:
    return await s.call(44, 1, {"resources": [{"resource_type": 2, "resource_name": topic, "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "86400000"}]}], "validate_only": True})


@scenario
async def topic_configs_decisions(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    out = [await describe_topic_configs(p.alice, name), await alter_topic_config(p.alice, name)]
    await p.grant(acl(TOPIC, name, ALTER_CONFIGS))  # implies describe-configs
    out += [await describe_topic_configs(p.alice, name), await alter_topic_config(p.alice, name)]
    await p.grant(acl(TOPIC, name, DESCRIBE_CONFIGS, DENY))
    return [*out, await describe_topic_configs(p.alice, name), await alter_topic_config(p.alice, name)]


@scenario
async def broker_configs_decisions(p: Pair, name: str) -> Any:
    node = str((await p.admin.call(60, 1, {}))["controller_id"])
    ask = {"resources": [{"resource_type": 4, "resource_name": node, "configuration_keys": ["num.partitions"]},
                         {"resource_type": 4, "resource_name": "", "configuration_keys": ["num.partitions"]}]}
    alter = {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
        {"name": "log.retention.ms", "config_operation": 0, "value": "86400000"}]}], "validate_only": True}

    def codes(answer: Any) -> Any:
        return [r["error_code"] for r in answer.get("results") or answer.get("responses")]

    out = [codes(await p.alice.call(32, 4, ask)), codes(await p.alice.call(44, 1, alter))]
    await p.grant(acl(CLUSTER, "kafka-cluster", DESCRIBE_CONFIGS))
    return [*out, codes(await p.alice.call(32, 4, ask)), codes(await p.alice.call(44, 1, alter))]


# -- consumer groups ----------------------------------------------------------------------------------------


def commit(group: str, topic: str) -> dict[str, Any]:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1}]}]}


def fetch_offsets(group: str, topic: str) -> dict[str, Any]:
    return {"groups": [{"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}]}


@scenario
async def classic_group_decisions(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    out = [await join(p.alice, name), await p.alice.call(10, 4, {"key_type": 0, "coordinator_keys": [name]})]
    await p.grant(acl(GROUP, name, READ))
    joined = await join(p.alice, name)
    out += [joined["error_code"], await p.alice.call(10, 4, {"key_type": 0, "coordinator_keys": [name]})]
    out.append(await join(p.alice, name, joined["member_id"]) if joined["error_code"] == 79 else joined)
    return out


@scenario
async def offset_commit_and_fetch_decisions(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    out = [await p.alice.call(8, 8, commit(name, name)), await p.alice.call(9, 8, fetch_offsets(name, name))]
    await p.grant(acl(GROUP, name, READ))
    out += [await p.alice.call(8, 8, commit(name, name)), await p.alice.call(9, 8, fetch_offsets(name, name))]
    await p.grant(acl(TOPIC, name, READ))
    out += [await p.alice.call(8, 8, commit(name, name)), await p.alice.call(9, 8, fetch_offsets(name, name))]
    await p.grant(acl(TOPIC, name, DESCRIBE, DENY))
    return [*out, await p.alice.call(9, 8, fetch_offsets(name, name))]


@scenario
async def describe_list_and_delete_groups(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    for g in (f"{name}-a", f"{name}-b"):
        assert (await p.admin.call(8, 8, commit(g, name)))["topics"][0]["partitions"][0]["error_code"] == 0

    async def listing() -> Any:
        groups = await p.alice.call(16, 4, {})
        groups["groups"] = sorted(g["group_id"] for g in groups["groups"] if g["group_id"].startswith(name))
        return groups

    groups = [f"{name}-a", f"{name}-b"]
    out = [await p.alice.call(15, 5, {"groups": groups, "include_authorized_operations": True}), await listing(),
           await p.alice.call(42, 2, {"groups_names": groups})]
    await p.grant(acl(GROUP, f"{name}-a", DELETE))
    out += [await p.alice.call(15, 5, {"groups": groups, "include_authorized_operations": True}), await listing(),
            await p.alice.call(42, 2, {"groups_names": groups})]
    return out


@scenario
async def offset_delete_decisions(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    await p.admin.call(8, 8, commit(name, name))
    delete = {"group_id": name, "topics": [{"name": name, "partitions": [{"partition_index": 0}]}]}
    out = [await p.alice.call(47, 0, delete)]
    await p.grant(acl(GROUP, name, DELETE))
    out.append(await p.alice.call(47, 0, delete))
    await p.grant(acl(TOPIC, name, READ))
    return [*out, await p.alice.call(47, 0, delete)]


@scenario
async def consumer_group_heartbeat_decisions(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)

    async def beat() -> Any:
        answer = await p.alice.call(68, 1, {"group_id": name, "member_id": str(uuid.uuid4()), "member_epoch": 0,
                                            "rebalance_timeout_ms": 30_000, "subscribed_topic_names": [name],
                                            "server_assignor": "uniform", "topic_partitions": []})
        return answer["error_code"]

    out = [await beat()]
    await p.grant(acl(GROUP, name, READ))
    out.append(await beat())
    return out


# -- share groups ---------------------------------------------------------------------------------------------


@scenario
async def share_group_decisions(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)

    async def beat() -> Any:
        answer = await p.alice.call(76, 1, {"group_id": name, "member_id": str(uuid.uuid4()), "member_epoch": 0,
                                            "subscribed_topic_names": [name]})
        return answer["error_code"]

    out = [await beat(), await p.alice.call(77, 1, {"group_ids": [name], "include_authorized_operations": True})]
    await p.grant(acl(GROUP, name, READ))
    out += [await beat(), await p.alice.call(77, 1, {"group_ids": [name], "include_authorized_operations": True})]
    out.append(await p.alice.call(42, 2, {"groups_names": [name]}))
    return out


# -- transactions and idempotence ------------------------------------------------------------------------------


async def init_producer(s: Side, transactional_id: str | None) -> Any:
    return await s.call(22, 4, {"transactional_id": transactional_id, "transaction_timeout": 60_000,
                                "producer_id": -1, "producer_epoch": -1})


@scenario
async def transactional_id_decisions(p: Pair, name: str) -> Any:
    find = {"key_type": 1, "coordinator_keys": [name]}
    out = [await p.alice.call(10, 4, find), await init_producer(p.alice, name)]
    await p.grant(acl(TXN_ID, name, DESCRIBE))
    out += [(await p.alice.call(10, 4, find))["coordinators"][0]["error_code"], await init_producer(p.alice, name)]
    await p.grant(acl(TXN_ID, name[:6], WRITE, pattern=PREFIXED))
    out.append((await init_producer(p.alice, name))["error_code"])
    return out


@scenario
async def transactional_produce_needs_write_on_both(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    await p.grant(acl(TXN_ID, name, WRITE))
    init = await init_producer(p.alice, name)
    added = {"v3_and_below_transactional_id": name, "v3_and_below_producer_id": init["producer_id"],
             "v3_and_below_producer_epoch": init["producer_epoch"],
             "v3_and_below_topics": [{"name": name, "partitions": [0]}]}
    out = [init["error_code"], await p.alice.call(24, 3, added)]
    await p.grant(acl(TOPIC, name, WRITE))
    return [*out, await p.alice.call(24, 3, added)]


@scenario
async def idempotent_write_decisions(p: Pair, name: str) -> Any:
    """KIP-679: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on any topic."""
    out = [(await init_producer(p.alice, None))["error_code"]]
    await p.grant(acl(TOPIC, name, WRITE))
    out.append((await init_producer(p.alice, None))["error_code"])
    await p.clean()
    await p.grant(acl(CLUSTER, "kafka-cluster", IDEMPOTENT_WRITE))
    out.append((await init_producer(p.alice, None))["error_code"])
    await p.grant(acl(CLUSTER, "kafka-cluster", IDEMPOTENT_WRITE, DENY))
    out.append((await init_producer(p.alice, None))["error_code"])
    return out


@scenario
async def idempotent_write_by_some_topic(p: Pair, name: str) -> Any:
    """authorizeByResourceType: an ALLOW counts unless a DENY covers all of it."""
    cases = [[acl(TOPIC, name, WRITE), acl(TOPIC, name, WRITE, DENY)],
             [acl(TOPIC, name, WRITE, pattern=PREFIXED), acl(TOPIC, name[:4], WRITE, DENY, pattern=PREFIXED)],
             [acl(TOPIC, name, WRITE, pattern=PREFIXED), acl(TOPIC, name, WRITE, DENY)],
             [acl(TOPIC, name + "-a", WRITE), acl(TOPIC, name + "-b", WRITE, DENY, pattern=PREFIXED)],
             [acl(TOPIC, name, ALL, principal="User:*"), acl(TOPIC, "*", WRITE, DENY, host="10.0.0.7")],
             [acl(TOPIC, name, WRITE), acl(TOPIC, "*", WRITE, DENY)]]
    out = []
    for bindings in cases:
        await p.clean()
        await p.grant(*bindings)
        out.append((await init_producer(p.alice, None))["error_code"])
    return out


@scenario
async def list_transactions_and_producers(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    init = await init_producer(p.admin, name)
    assert init["error_code"] == 0, init
    add = await p.admin.call(24, 3, {"v3_and_below_transactional_id": name, "v3_and_below_producer_id":
                                     init["producer_id"], "v3_and_below_producer_epoch": init["producer_epoch"],
                                     "v3_and_below_topics": [{"name": name, "partitions": [0]}]})
    assert add["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0, add

    async def listing() -> Any:
        answer = await p.alice.call(66, 1, {})
        return [answer["error_code"], sorted(t["transactional_id"] for t in answer["transaction_states"]
                                             if t["transactional_id"].startswith(name))]

    producers = {"topics": [{"name": name, "partition_indexes": [0]}]}
    described = {"transactional_ids": [name]}
    out = [await listing(), await p.alice.call(61, 0, producers), await p.alice.call(65, 0, described)]
    await p.grant(acl(TXN_ID, name, DESCRIBE), acl(TOPIC, name, READ))
    out += [await listing(), (await p.alice.call(61, 0, producers))["topics"][0]["partitions"][0]["error_code"],
            (await p.alice.call(65, 0, described))["transaction_states"][0]["error_code"]]
    await p.admin.call(26, 3, {"transactional_id": name, "producer_id": init["producer_id"],
                               "producer_epoch": init["producer_epoch"], "committed": False})
    return out


# -- more of what a client is answered ---------------------------------------------------------------------------


@scenario
async def metadata_auto_create_by_a_writer(p: Pair, name: str) -> Any:
    await p.grant(acl(TOPIC, name, WRITE))
    return [await metadata_as(p.alice, [name], auto_create=True), await produce_as(p.alice, name)]


@scenario
async def produce_to_a_missing_topic_one_may_create(p: Pair, name: str) -> Any:
    await p.grant(acl(TOPIC, name, WRITE), acl(TOPIC, name, CREATE))
    return await produce_as(p.alice, name)


@scenario
async def list_offsets_and_leader_epochs(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    offsets = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": name, "partitions": [
        {"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]}
    epochs = {"replica_id": -1, "topics": [{"topic": name, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}
    out = [await p.alice.call(2, 7, offsets), await p.alice.call(23, 4, epochs)]
    await p.grant(acl(TOPIC, name, DESCRIBE))
    return [*out, await p.alice.call(2, 7, offsets), await p.alice.call(23, 4, epochs)]


@scenario
async def a_deny_of_describe_beats_an_allowed_read(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    await p.grant(acl(TOPIC, name, READ), acl(TOPIC, name, DESCRIBE, DENY))
    return [await fetch_as(p.alice, name), await metadata_as(p.alice, [name])]


@scenario
async def a_wildcard_principal_from_one_host(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    await p.grant(acl(TOPIC, name, WRITE, principal="User:*", host="127.0.0.1"))
    allowed = await produce_as(p.alice, name)
    await p.clean()
    await p.grant(acl(TOPIC, name, WRITE, principal="User:*", host="10.0.0.7"))
    return [allowed, await produce_as(p.alice, name)]


@scenario
async def group_configs_decisions(p: Pair, name: str) -> Any:
    ask = {"resources": [{"resource_type": 32, "resource_name": name, "configuration_keys": ["share.auto.offset.reset"]}]}
    alter = {"resources": [{"resource_type": 32, "resource_name": name, "configs": [
        {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}], "validate_only": True}

    async def ask_both() -> Any:
        described = await p.alice.call(32, 4, ask)
        return [[(r["error_code"], [c["name"] for c in r["configs"]]) for r in described["results"]],
                await p.alice.call(44, 1, alter)]

    out = [await ask_both()]
    await p.grant(acl(GROUP, name, ALTER_CONFIGS))
    return [*out, await ask_both()]


@scenario
async def consumer_group_describe_and_topics(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    member = str(uuid.uuid4())
    beat = {"group_id": name, "member_id": member, "member_epoch": 0, "rebalance_timeout_ms": 30_000,
            "subscribed_topic_names": [name], "server_assignor": "uniform", "topic_partitions": []}
    await p.grant(acl(GROUP, name, READ))
    out = [(await p.alice.call(68, 1, beat))["error_code"]]
    await p.grant(acl(TOPIC, name, DESCRIBE))
    out.append((await p.alice.call(68, 1, beat))["error_code"])
    described = await p.alice.call(69, 1, {"group_ids": [name, name + "-other"], "include_authorized_operations": True})
    out.append([(g["group_id"], g["error_code"], g["authorized_operations"]) for g in described["groups"]])
    await p.admin.call(68, 1, {"group_id": name, "member_id": member, "member_epoch": -1})
    return out


@scenario
async def share_fetch_and_acknowledge_decisions(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    await p.grant(acl(GROUP, name, READ))
    member = str(uuid.uuid4())
    topic_id = await p.admin.topic_id(name)
    fetch = {"group_id": name, "member_id": member, "share_session_epoch": 0, "max_wait": 0, "min_bytes": 0,
             "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
             "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0}]}]}
    ack = {"group_id": name, "member_id": member, "share_session_epoch": 1,
           "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]}
    beat = await p.alice.call(76, 1, {"group_id": name, "member_id": member, "member_epoch": 0,
                                      "subscribed_topic_names": [name]})
    answers = [beat["error_code"], await p.alice.call(78, 1, fetch), await p.alice.call(79, 1, ack)]
    await p.alice.call(76, 1, {"group_id": name, "member_id": member, "member_epoch": -1})
    return answers


@scenario
async def transactional_offsets_need_the_group(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    await p.grant(acl(TXN_ID, name, WRITE), acl(TOPIC, name, READ))
    init = await init_producer(p.alice, name)
    ids = {"transactional_id": name, "producer_id": init["producer_id"], "producer_epoch": init["producer_epoch"]}
    commit_txn = {**ids, "group_id": name, "generation_id": -1, "member_id": "", "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1}]}]}
    out = [await p.alice.call(25, 3, {**ids, "group_id": name}), await p.alice.call(28, 3, commit_txn)]
    await p.admin.call(26, 3, {**ids, "committed": False})
    return out


@scenario
async def list_groups_with_cluster_describe(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    for g in (f"{name}-a", f"{name}-b"):
        await p.admin.call(8, 8, commit(g, name))
    await p.grant(acl(GROUP, f"{name}-a", DESCRIBE, DENY), acl(CLUSTER, "kafka-cluster", DESCRIBE))
    groups = await p.alice.call(16, 4, {})
    return [groups["error_code"], sorted(g["group_id"] for g in groups["groups"] if g["group_id"].startswith(name))]


@scenario
async def transactional_produce_without_the_transactional_id(p: Pair, name: str) -> Any:
    """Only transactional records need WRITE on the transactional id, and then they must name one."""
    await create(p.admin, name, 1)
    await p.grant(acl(TOPIC, name, WRITE))
    builder = BatchBuilder(producer_id=1, producer_epoch=0, base_sequence=0, transactional=True)
    builder.append(b"v", b"k", timestamp=T0)
    txn = Records(builder.build())

    async def send(tid: str | None, records: Records) -> Any:
        return await p.alice.call(0, 9, {"transactional_id": tid, "acks": -1, "timeout": 10_000, "topic_data": [
            {"name": name, "partition_data": [{"index": 0, "records": records}]}]})

    return [await send(name, batch(1)), await send(name, txn), await send(None, txn)]


@scenario
async def acls_on_users_tokens_and_transactional_ids(p: Pair, name: str) -> Any:
    made = await p.grant(acl(7, name, ALTER), acl(6, name, DESCRIBE), acl(TXN_ID, name, WRITE, pattern=PREFIXED),
                         acl(7, name, READ))
    return [made, listed(await p.admin.call(29, 3, acl_filter(7))), listed(await p.admin.call(29, 3, acl_filter(6))),
            listed(await p.admin.call(29, 3, acl_filter(TXN_ID, name + "-x", MATCH)))]


@scenario
async def acl_deletion_by_one_with_cluster_alter(p: Pair, name: str) -> Any:
    await p.grant(acl(TOPIC, name, READ, principal="User:bob"), acl(TOPIC, name, WRITE, principal="User:bob"),
                  acl(CLUSTER, "kafka-cluster", ALTER))
    deleted = listed(await p.alice.call(31, 3, {"filters": [acl_filter(TOPIC, name, LITERAL, operation=WRITE)]}))
    p.count -= 1
    return [deleted, await p.settled()]


@scenario
async def classic_member_requests_without_the_group(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    member = {"group_id": name, "generation_id": 1, "member_id": "m"}
    return [await p.alice.call(12, 4, member),
            await p.alice.call(14, 5, {**member, "protocol_type": "consumer", "protocol_name": "range",
                                       "assignments": []}),
            await p.alice.call(13, 5, {"group_id": name, "members": [{"member_id": "m"}]})]


@scenario
async def offset_fetch_of_every_topic(p: Pair, name: str) -> Any:
    for t in (f"{name}-a", f"{name}-b"):
        await create(p.admin, t, 1)
        await p.admin.call(8, 8, commit(name, t))
    await p.grant(acl(GROUP, name, DESCRIBE), acl(TOPIC, f"{name}-a", DESCRIBE))
    every = await p.alice.call(9, 8, {"groups": [{"group_id": name, "topics": None}]})
    return every


@scenario
async def topic_admin_of_missing_topics(p: Pair, name: str) -> Any:
    grow = {"topics": [{"name": name, "count": 2, "assignments": None}], "timeout": 10_000, "validate_only": True}
    trim = {"topics": [{"name": name, "partitions": [{"partition_index": 0, "offset": 0}]}], "timeout": 10_000}
    legacy = {"resources": [{"resource_type": 2, "resource_name": name, "configs": [
        {"name": "retention.ms", "value": "1000"}]}], "validate_only": True}
    out = [await p.alice.call(37, 3, grow), await p.alice.call(21, 2, trim), await p.alice.call(33, 2, legacy)]
    await p.grant(acl(TOPIC, name, ALL))
    return [*out, await p.alice.call(37, 3, grow), await p.alice.call(21, 2, trim), await p.alice.call(33, 2, legacy)]


@scenario
async def auto_create_with_cluster_create_but_no_describe(p: Pair, name: str) -> Any:
    await p.grant(acl(CLUSTER, "kafka-cluster", CREATE))
    return await metadata_as(p.alice, [name], auto_create=True)


@scenario
async def everything_denied_on_the_cluster(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    await p.grant(acl(TOPIC, "*", ALL), acl(CLUSTER, "kafka-cluster", ALL), acl(CLUSTER, "kafka-cluster", ALL, DENY))
    return [await produce_as(p.alice, name), (await init_producer(p.alice, None))["error_code"],
            (await p.alice.call(29, 3, EVERY))["error_code"], [(t["error_code"], t["topic_config_error_code"]) for t in (await create_as(p.alice, name + "-new"))["topics"]],
            (await p.alice.call(60, 1, {"include_cluster_authorized_operations": True}))
            ["cluster_authorized_operations"]]


# -- the cluster --------------------------------------------------------------------------------------------------


@scenario
async def cluster_operations_decisions(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)

    async def ask() -> Any:
        return [await p.alice.call(60, 1, {"include_cluster_authorized_operations": True}),
                (await p.alice.call(43, 2, {"election_type": 0, "topic_partitions": [
                    {"topic": name, "partitions": [0]}], "timeout": 10_000}))["error_code"],
                (await p.alice.call(35, 4, {"topics": None}))["error_code"],
                (await p.alice.call(50, 0, {"users": [{"name": "bob"}]}))["error_code"],
                (await p.alice.call(51, 0, {"deletions": [{"name": "carol", "mechanism": 1}], "upsertions": []}))]

    out = [await ask()]
    await p.grant(acl(CLUSTER, "kafka-cluster", DESCRIBE), acl(CLUSTER, "kafka-cluster", ALTER))
    out.append(await ask())
    return out


@scenario
async def authorized_operations_reported(p: Pair, name: str) -> Any:
    await create(p.admin, name, 1)
    await p.grant(acl(TOPIC, name, READ), acl(TOPIC, name, ALTER_CONFIGS), acl(TOPIC, name[:6], DELETE, DENY,
                                                                                  pattern=PREFIXED),
                  acl(CLUSTER, "kafka-cluster", CREATE), acl(GROUP, name, READ))
    topic = await p.alice.call(75, 0, {"topics": [{"name": name}], "response_partition_limit": 10})
    return [(await metadata_as(p.alice, [name]))["topics"][0]["topic_authorized_operations"],
            topic["topics"][0]["topic_authorized_operations"],
            (await p.alice.call(60, 1, {"include_cluster_authorized_operations": True}))
            ["cluster_authorized_operations"]]


# -- the test ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def kafka_bs(sasl_kafka_broker: SaslKafkaBroker) -> str:
    """Its SASL listener once its group and transaction coordinators serve (see coordinators_ready)."""
    from tests.differential import coordinators_ready

    s = Login("kafka", sasl_kafka_broker.sasl_bootstrap, user="admin")
    try:
        await coordinators_ready(s)
    finally:
        await s.close()
    return sasl_kafka_broker.sasl_bootstrap


@pytest.fixture(scope="module")
async def gateway_bs(redis_server: str) -> AsyncIterator[str]:
    """A gateway with authentication on, over the suite's Redis, with the broker's users."""
    flush(redis_server)
    async with running_gateway(test_config(redis_server, auth=True, super_users="admin")) as gw:
        for user, password in SASL_USERS.items():
            await gw.services.security.set_user(user, password)
        yield kafka_bootstrap(gw)


def test_the_acl_corpus_is_large_enough() -> None:
    assert len(SCENARIOS) >= 30, len(SCENARIOS)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_acl_decisions_are_kafkas(name: str, kafka_bs: str, gateway_bs: str) -> None:
    await compare(SCENARIOS[name], kafka_bs, gateway_bs, name.replace("_", "-")[:30])
