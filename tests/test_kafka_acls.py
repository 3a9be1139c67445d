"""ACLs, SCRAM users, OffsetDelete and authorized operations over the Kafka protocol, with the real
admin clients (confluent-kafka's AdminClient, kafka-python's KafkaAdminClient)."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka as ck
import confluent_kafka.admin as cka
import kafka
import kafka.admin as kpa
import kafka.errors
import pytest

from gateway.domain.security import Acl, AclFilter, Operation, Permission, ResourceType
from gateway.server.gateway import Gateway
from tests.conftest import admin_url, kafka_bootstrap
from tests.kafka_clients import TIMEOUT, produce, sasl
from tests.test_security import ADMIN_TOKEN, http, secure  # noqa: F401 (the fixture)

pytestmark = pytest.mark.kafka

ADMIN = sasl("confluent", "SCRAM-SHA-256", "admin", "admin-secret")
KP_ADMIN = sasl("kafka-python", "SCRAM-SHA-256", "admin", "admin-secret")


def confluent_admin(gw: Gateway, **creds: object) -> cka.AdminClient:
    return cka.AdminClient({"bootstrap.servers": kafka_bootstrap(gw), **creds})


def kafka_python_admin(gw: Gateway, **creds: object) -> kpa.KafkaAdminClient:
    return kpa.KafkaAdminClient(bootstrap_servers=kafka_bootstrap(gw), request_timeout_ms=int(TIMEOUT * 1000), **creds)


def _binding(name: str, operation: cka.AclOperation, permission: cka.AclPermissionType,
             pattern: cka.ResourcePatternType = cka.ResourcePatternType.LITERAL) -> cka.AclBinding:
    return cka.AclBinding(cka.ResourceType.TOPIC, name, pattern, "User:alice", "*", operation, permission)


def _produce_error(gw: Gateway, topic: str) -> ck.KafkaError | None:
    """What alice's producer gets for one message to `topic` (None: delivered)."""
    results: list[ck.KafkaError | None] = []
    p = ck.Producer({**sasl("confluent", "SCRAM-SHA-256", "alice", "alice-secret"),
                     "bootstrap.servers": kafka_bootstrap(gw), "message.timeout.ms": int(TIMEOUT * 1000)})
    p.produce(topic, b"x", on_delivery=lambda err, msg: results.append(err))
    p.flush(TIMEOUT)
    return results[0]


def _http_acls(gw: Gateway) -> list[dict]:
    status, listed = http("GET", admin_url(gw) + "/admin/v2/acls?principal=User:alice", token=ADMIN_TOKEN)
    assert status == 200
    return listed


async def test_acls_made_over_kafka_deny_a_client_and_the_admin_api_sees_them(secure):  # noqa: F811
    await secure.services.log.create_topic("orders", 1)
    admin = confluent_admin(secure, **ADMIN)

    def run() -> None:
        allow = _binding("orders", cka.AclOperation.WRITE, cka.AclPermissionType.ALLOW)
        deny = _binding("ord", cka.AclOperation.WRITE, cka.AclPermissionType.DENY, cka.ResourcePatternType.PREFIXED)
        for f in admin.create_acls([allow]).values():
            f.result(TIMEOUT)
        assert _produce_error(secure, "orders") is None
        assert _http_acls(secure) == [{"principal": "User:alice", "resource_type": "topic", "resource_name": "orders",
                                       "pattern": "literal", "operation": "write"}]
        # a DENY beats the ALLOW
        for f in admin.create_acls([deny]).values():
            f.result(TIMEOUT)
        assert _produce_error(secure, "orders").code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert {"principal": "User:alice", "resource_type": "topic", "resource_name": "ord", "pattern": "prefixed",
                "operation": "write", "permission": "deny"} in _http_acls(secure)
        # deleted over Kafka: gone for the admin API and for the producer
        deleted = admin.delete_acls([cka.AclBindingFilter(
            cka.ResourceType.ANY, None, cka.ResourcePatternType.ANY, "User:alice", None,
            cka.AclOperation.ANY, cka.AclPermissionType.DENY)])
        assert [str(b.name) for b in next(iter(deleted.values())).result(TIMEOUT)] == ["ord"]
        assert [a["resource_name"] for a in _http_acls(secure)] == ["orders"]
        assert _produce_error(secure, "orders") is None

    await asyncio.to_thread(run)


async def test_acls_made_over_the_admin_api_are_described_and_deleted_over_kafka(secure):  # noqa: F811
    base = admin_url(secure) + "/admin/v2/acls"
    status, _ = await asyncio.to_thread(http, "POST", base, {
        "principal": "User:alice", "resource_type": "group", "resource_name": "billing", "operation": "admin"},
        token=ADMIN_TOKEN)
    assert status == 201
    admin = confluent_admin(secure, **ADMIN)
    group_filter = cka.AclBindingFilter(cka.ResourceType.GROUP, "billing", cka.ResourcePatternType.LITERAL, None, None,
                                        cka.AclOperation.ANY, cka.AclPermissionType.ANY)

    def described() -> set[str]:
        return {b.operation.name for b in admin.describe_acls(group_filter).result(TIMEOUT)}

    # admin is stored as the five Kafka operations that administer a resource
    assert await asyncio.to_thread(described) == {"CREATE", "DELETE", "ALTER", "ALTER_CONFIGS", "DESCRIBE_CONFIGS"}
    status, _ = await asyncio.to_thread(http, "DELETE", base, {
        "principal": "User:alice", "resource_type": "group", "resource_name": "billing", "operation": "delete"},
        token=ADMIN_TOKEN)
    assert status == 200
    assert await asyncio.to_thread(described) == {"CREATE", "ALTER", "ALTER_CONFIGS", "DESCRIBE_CONFIGS"}
    await asyncio.to_thread(lambda: next(iter(admin.delete_acls([group_filter]).values())).result(TIMEOUT))
    assert await asyncio.to_thread(_http_acls, secure) == []


async def test_prefixed_and_match_filters_with_kafka_python(secure):  # noqa: F811
    kp = await asyncio.to_thread(kafka_python_admin, secure, **KP_ADMIN)
    R, P = kpa.ResourceType, kpa.ACLResourcePatternType

    def acl(name: str, pattern: P, op: kpa.ACLOperation = kpa.ACLOperation.READ) -> kpa.ACL:
        return kpa.ACL("User:alice", "*", op, kpa.ACLPermissionType.ALLOW, kpa.ResourcePattern(R.TOPIC, name, pattern))

    def where(name: str | None, pattern: P) -> kpa.ACLFilter:
        return kpa.ACLFilter(None, None, kpa.ACLOperation.ANY, kpa.ACLPermissionType.ANY,
                             kpa.ResourcePatternFilter(R.TOPIC, name, pattern))

    def run() -> None:
        made = kp.create_acls([acl("logs-app", P.LITERAL), acl("logs-", P.PREFIXED), acl("*", P.LITERAL),
                               acl("logs-other", P.LITERAL), acl("metrics-", P.PREFIXED, kpa.ACLOperation.WRITE)])
        assert len(made["succeeded"]) == 5 and not made["failed"]

        def names(f: kpa.ACLFilter) -> list[tuple[str, str]]:
            found, error = kp.describe_acls(f)
            assert error is kafka.errors.NoError
            return sorted((a.resource_pattern.resource_name, a.resource_pattern.pattern_type.name) for a in found)

        # MATCH: every ACL that applies to the topic logs-app
        assert names(where("logs-app", P.MATCH)) == [("*", "LITERAL"), ("logs-", "PREFIXED"), ("logs-app", "LITERAL")]
        assert names(where(None, P.PREFIXED)) == [("logs-", "PREFIXED"), ("metrics-", "PREFIXED")]
        assert names(where("logs-", P.ANY)) == [("logs-", "PREFIXED")]  # ANY: the name as given, any pattern
        [(_, deleted, error)] = kp.delete_acls([where("logs-app", P.MATCH)])
        assert error is kafka.errors.NoError
        assert sorted(a.resource_pattern.resource_name for a in deleted) == ["*", "logs-", "logs-app"]
        assert names(where(None, P.ANY)) == [("logs-other", "LITERAL"), ("metrics-", "PREFIXED")]
        # ACLs nobody may store: no name, the cluster by another name
        bad = kp.create_acls([
            acl("", P.LITERAL),
            kpa.ACL("User:alice", "*", kpa.ACLOperation.ALTER, kpa.ACLPermissionType.ALLOW,
                    kpa.ResourcePattern(R.CLUSTER, "other", P.LITERAL))])
        assert len(bad["failed"]) == 2

    try:
        await asyncio.to_thread(run)
    finally:
        await asyncio.to_thread(kp.close)


async def test_alice_needs_alter_on_the_cluster_to_manage_acls(secure):  # noqa: F811
    alice = confluent_admin(secure, **sasl("confluent", "SCRAM-SHA-256", "alice", "alice-secret"))
    f = alice.create_acls([_binding("orders", cka.AclOperation.READ, cka.AclPermissionType.ALLOW)])
    with pytest.raises(ck.KafkaException) as caught:
        await asyncio.to_thread(next(iter(f.values())).result, TIMEOUT)
    assert caught.value.args[0].code() == ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert await secure.services.security.acls() == []


async def test_deny_wins_and_hosts_match_in_the_authorizer(secure):  # noqa: F811
    security = secure.services.security
    await security.create_acls([
        Acl("User:*", ResourceType.TOPIC, "*", Operation.ALL),
        Acl("User:alice", ResourceType.TOPIC, "pay", Operation.READ, "prefixed", "*", Permission.DENY),
        Acl("User:alice", ResourceType.TOPIC, "logs", Operation.WRITE, host="10.0.0.9", permission=Permission.DENY),
    ])

    async def may(name: str, op: Operation, host: str | None = "127.0.0.1") -> bool:
        return await security.authorize("User:alice", ResourceType.TOPIC, name, op, host)

    assert not await may("payments", Operation.READ)
    assert await may("payments", Operation.DESCRIBE)  # a DENY of read does not deny describe
    assert await may("logs", Operation.WRITE)  # the DENY is for another host
    assert not await may("logs", Operation.WRITE, "10.0.0.9")
    assert not await may("logs", Operation.WRITE, None)  # an unknown host meets every DENY
    assert await security.acls(acl_filter=AclFilter(permission=Permission.DENY, host="10.0.0.9")) == [
        Acl("User:alice", ResourceType.TOPIC, "logs", Operation.WRITE, host="10.0.0.9", permission=Permission.DENY)]


# -- SCRAM users --------------------------------------------------------------------------------


def _authenticates(gw: Gateway, mechanism: str, user: str, password: str) -> bool:
    """Whether a confluent-kafka admin client gets in (a metadata request answered)."""
    errors: list[ck.KafkaError] = []
    admin = cka.AdminClient({**sasl("confluent", mechanism, user, password), "bootstrap.servers": kafka_bootstrap(gw),
                             "error_cb": errors.append})
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=1)
            return True
        except ck.KafkaException:
            admin.poll(0)  # serves error_cb
            if any(e.code() == ck.KafkaError._AUTHENTICATION for e in errors):
                return False
    raise AssertionError("neither in nor refused")


async def test_scram_users_made_over_kafka_authenticate_until_deleted(secure):  # noqa: F811
    admin = confluent_admin(secure, **ADMIN)
    sha256, sha512 = cka.ScramMechanism.SCRAM_SHA_256, cka.ScramMechanism.SCRAM_SHA_512

    def run() -> None:
        made = admin.alter_user_scram_credentials([
            cka.UserScramCredentialUpsertion("bob", cka.ScramCredentialInfo(sha256, 8192), b"bob-secret"),
            cka.UserScramCredentialUpsertion("carol", cka.ScramCredentialInfo(sha512, 4096), b"carol-secret")])
        for f in made.values():
            f.result(TIMEOUT)
        assert _authenticates(secure, "SCRAM-SHA-256", "bob", "bob-secret")
        assert _authenticates(secure, "SCRAM-SHA-512", "carol", "carol-secret")
        assert not _authenticates(secure, "SCRAM-SHA-512", "bob", "bob-secret")  # only the mechanism it was given
        assert _authenticates(secure, "PLAIN", "bob", "bob-secret")
        described = admin.describe_user_scram_credentials(["bob"])["bob"].result(TIMEOUT)
        assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [(sha256, 8192)]
        # every user with a credential, those of the admin API too
        everyone = admin.describe_user_scram_credentials().result(TIMEOUT)
        assert sorted(everyone) == ["admin", "alice", "bob", "carol"]
        gone = admin.alter_user_scram_credentials([cka.UserScramCredentialDeletion("bob", sha256)])
        gone["bob"].result(TIMEOUT)
        assert not _authenticates(secure, "SCRAM-SHA-256", "bob", "bob-secret")
        with pytest.raises(ck.KafkaException) as caught:
            admin.describe_user_scram_credentials(["bob"])["bob"].result(TIMEOUT)
        assert caught.value.args[0].code() == ck.KafkaError.RESOURCE_NOT_FOUND
        again = admin.alter_user_scram_credentials([cka.UserScramCredentialDeletion("bob", sha256)])
        with pytest.raises(ck.KafkaException) as caught:
            again["bob"].result(TIMEOUT)
        assert caught.value.args[0].code() == ck.KafkaError.RESOURCE_NOT_FOUND

    await asyncio.to_thread(run)
    assert (await secure.services.security.user("carol")).mechanisms == ["SCRAM-SHA-512"]  # the admin API's view


async def test_scram_users_with_kafka_python(secure):  # noqa: F811
    kp = await asyncio.to_thread(kafka_python_admin, secure, **KP_ADMIN)
    M = kpa.ScramMechanism

    def run() -> None:
        assert kp.alter_user_scram_credentials([
            kpa.UserScramCredentialUpsertion("dave", M.SCRAM_SHA_512, "dave-secret")]) == {"dave": None}
        assert kp.describe_user_scram_credentials(["dave"])["dave"]["credential_infos"] == [
            {"mechanism": M.SCRAM_SHA_512, "iterations": 4096}]
        refused = kp.alter_user_scram_credentials([
            kpa.UserScramCredentialUpsertion("erin", M.SCRAM_SHA_256, "x", iterations=100),
            kpa.UserScramCredentialUpsertion("dave", M.SCRAM_SHA_256, "y"),
            kpa.UserScramCredentialDeletion("dave", M.SCRAM_SHA_512)])
        assert refused == {"erin": "Too few iterations",
                           "dave": "A user credential cannot be altered twice in the same request"}

    try:
        await asyncio.to_thread(run)
    finally:
        await asyncio.to_thread(kp.close)
    assert await secure.services.security.check_password("dave", "dave-secret") == "User:dave"
    assert await secure.services.security.user("erin") is None


# -- OffsetDelete -------------------------------------------------------------------------------


def _commit(bs: str, group: str, offsets: dict[tuple[str, int], int], **creds: object) -> None:
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False, **creds})
    c.commit(offsets=[ck.TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    c.close()


async def test_offset_delete_on_a_stopped_and_an_active_group(gateway):
    bs = kafka_bootstrap(gateway)
    for topic in ("subscribed", "other"):
        await gateway.services.log.create_topic(topic, 2)
    await produce("confluent", bs, "subscribed", [(None, b"x")])
    offsets = {("subscribed", 0): 1, ("subscribed", 1): 0, ("other", 0): 5}
    await asyncio.to_thread(_commit, bs, "stopped", offsets)
    await asyncio.to_thread(_commit, bs, "active", offsets)
    kp = await asyncio.to_thread(kafka_python_admin, gateway)
    TP = kafka.TopicPartition
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": "active", "enable.auto.commit": False})

    def run() -> None:
        # a group nobody consumes in: its offsets go
        done = kp.delete_group_offsets("stopped", [TP("subscribed", 0), TP("other", 0)])
        assert done == {TP("subscribed", 0): kafka.errors.NoError, TP("other", 0): kafka.errors.NoError}
        left = kp.list_group_offsets({"stopped": None})["stopped"]
        assert sorted(left) == [TP("subscribed", 1)]
        # a consumer subscribed to one topic: that topic's offsets stay, the other's go
        consumer.subscribe(["subscribed"])
        deadline = time.monotonic() + TIMEOUT
        while not consumer.assignment():
            assert time.monotonic() < deadline
            consumer.poll(0.2)
        done = kp.delete_group_offsets("active", [TP("subscribed", 0), TP("subscribed", 1), TP("other", 0)])
        assert done == {TP("subscribed", 0): kafka.errors.GroupSubscribedToTopicError,
                        TP("subscribed", 1): kafka.errors.GroupSubscribedToTopicError,
                        TP("other", 0): kafka.errors.NoError}
        left = kp.list_group_offsets({"active": None})["active"]
        assert sorted(left) == [TP("subscribed", 0), TP("subscribed", 1)]
        assert kp.delete_group_offsets("active", [TP("missing", 0)]) == {
            TP("missing", 0): kafka.errors.UnknownTopicOrPartitionError}
        with pytest.raises(kafka.errors.GroupIdNotFoundError):
            kp.delete_group_offsets("nobody", [TP("other", 0)])

    try:
        await asyncio.to_thread(run)
    finally:
        await asyncio.to_thread(consumer.close)
        await asyncio.to_thread(kp.close)


# -- authorized operations (KIP-430) ------------------------------------------------------------

TOPIC_OPERATIONS = {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
CLUSTER_OPERATIONS = {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER",
                      "DESCRIBE"}
GROUP_OPERATIONS = {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}


def _authorized(admin: cka.AdminClient, topic: str, group: str) -> tuple[set[str], set[str], set[str]]:
    """What confluent-kafka reports as authorized on the cluster, a topic and a group."""
    cluster = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    [t] = admin.describe_topics(ck.TopicCollection([topic]), include_authorized_operations=True).values()
    [g] = admin.describe_consumer_groups([group], include_authorized_operations=True).values()
    return ({op.name for op in cluster.authorized_operations}, {op.name for op in t.result(TIMEOUT).authorized_operations},
            {op.name for op in g.result(TIMEOUT).authorized_operations})


async def test_authorized_operations_with_authentication_off_are_all_of_them(gateway):
    await gateway.services.log.create_topic("orders", 1)
    await asyncio.to_thread(_commit, kafka_bootstrap(gateway), "billing", {("orders", 0): 0})
    cluster, topic, group = await asyncio.to_thread(_authorized, confluent_admin(gateway), "orders", "billing")
    assert (cluster, topic, group) == (CLUSTER_OPERATIONS, TOPIC_OPERATIONS, GROUP_OPERATIONS)


async def test_authorized_operations_follow_the_acls(secure):  # noqa: F811
    await secure.services.log.create_topic("orders", 1)
    await asyncio.to_thread(_commit, kafka_bootstrap(secure), "billing", {("orders", 0): 0}, **ADMIN)
    alice = "User:alice"
    await secure.services.security.create_acls([
        Acl(alice, ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE),
        Acl(alice, ResourceType.TOPIC, "orders", Operation.ALL),
        Acl(alice, ResourceType.TOPIC, "ord", Operation.DELETE, "prefixed", permission=Permission.DENY),
        Acl(alice, ResourceType.GROUP, "billing", Operation.READ),
    ])
    admin = confluent_admin(secure, **sasl("confluent", "SCRAM-SHA-256", "alice", "alice-secret"))
    cluster, topic, group = await asyncio.to_thread(_authorized, admin, "orders", "billing")
    assert cluster == {"DESCRIBE"}
    assert topic == TOPIC_OPERATIONS - {"DELETE"}
    assert group == {"READ", "DESCRIBE"}
    # a super user may do everything
    admin = confluent_admin(secure, **ADMIN)
    assert await asyncio.to_thread(_authorized, admin, "orders", "billing") == (
        CLUSTER_OPERATIONS, TOPIC_OPERATIONS, GROUP_OPERATIONS)


def test_the_cli_offers_every_operation():
    from gateway.cli import ACL_OPERATIONS

    assert sorted(ACL_OPERATIONS) == sorted(Operation)
