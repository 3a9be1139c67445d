"""Authentication and authorization: SASL with the real Kafka clients, ACLs, the admin API and CLI."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import struct
import sys
import time
import urllib.error
import urllib.request

import confluent_kafka as ck
import kafka
import kafka.errors
import pytest
import redis as redis_sync
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError as AioKafkaError
from kio.schema.errors import ErrorCode as KafkaError

from gateway.client import AuthenticationFailed, AuthorizationFailed, Client
from gateway.domain.security import Acl, Operation, ResourceType, SecurityService
from gateway.errors import ErrorCode
from gateway.formats.frames import frame as native_frame
from gateway.formats.records import build_batch
from gateway.kafka.dispatch import ApiKey
from gateway.pb import gateway_pb2 as pb
from gateway.server.gateway import Gateway
from gateway.store import Store
from gateway.store import keys as store_keys
from tests.conftest import admin_url, kafka_bootstrap, native_url, test_config
from tests.kafka_clients import CLIENTS, consume, produce, sasl
from tests.kafka_wire import TIMEOUT, build_request, call, read_response, request

ADMIN_TOKEN = "bootstrap-admin-token"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@pytest.fixture
async def secure(redis_url):
    """A gateway with authentication on: `admin` is a super user, `alice` has no ACLs yet."""
    gw = Gateway(test_config(redis_url, auth=True, super_users="admin", admin_token=ADMIN_TOKEN))
    await gw.start()
    await gw.services.security.set_user("admin", "admin-secret")
    await gw.services.security.set_user("alice", "alice-secret")
    try:
        yield gw
    finally:
        await gw.stop()


async def allow(gw: Gateway, principal: str, resource: ResourceType, name: str, operation: Operation, **kw) -> None:
    await gw.services.security.add_acl(Acl(principal, resource, name, operation, **kw))


# -- SASL with each real client -------------------------------------------------------------------


@pytest.mark.kafka
@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", CLIENTS)
async def test_each_client_authenticates_with_each_mechanism(secure, client, mechanism):
    bs = kafka_bootstrap(secure)
    creds = sasl(client, mechanism, "admin", "admin-secret")
    topic = f"sasl-{client}-{mechanism}".lower()
    done = await produce(client, bs, topic, [(b"k", b"authenticated")], **creds)
    assert done == [(0, 0)]
    got = await consume(client, bs, topic, 0, 0, 1, **creds)
    assert [(r[2], r[3]) for r in got] == [(b"k", b"authenticated")]


@pytest.mark.kafka
@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_kafka_python_authenticates_over_the_unframed_v0_handshake(secure, mechanism):
    """A client that believes the broker is Kafka 0.11 sends SaslHandshake v0, then bare SASL messages."""
    bs = kafka_bootstrap(secure)
    creds = sasl("kafka-python", mechanism, "admin", "admin-secret")
    done = await produce("kafka-python", bs, "sasl-v0", [(None, b"old style")], api_version=(0, 11), **creds)
    assert done == [(0, 0)]


def _confluent_wrong_password(bs: str, mechanism: str) -> list[ck.KafkaError]:
    errors: list[ck.KafkaError] = []
    delivered: list[object] = []
    producer = ck.Producer({**sasl("confluent", mechanism, "alice", "wrong"), "bootstrap.servers": bs,
                            "error_cb": errors.append, "message.timeout.ms": 60_000})
    producer.produce("never", b"x", on_delivery=lambda err, msg: delivered.append(err))
    deadline = time.monotonic() + TIMEOUT
    while not any(e.code() == ck.KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.1)
    producer.purge()
    producer.flush(1)
    assert all(err is not None for err in delivered)
    return errors


def _kafka_python_wrong_password(bs: str, mechanism: str) -> BaseException:
    with pytest.raises(kafka.errors.KafkaTimeoutError) as caught:
        kafka.KafkaProducer(bootstrap_servers=bs, bootstrap_timeout_ms=1500,
                            **sasl("kafka-python", mechanism, "alice", "wrong"))
    return caught.value


@pytest.mark.kafka
@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_a_wrong_password_is_refused_and_nothing_is_written(secure, mechanism, caplog):
    bs = kafka_bootstrap(secure)
    errors = await asyncio.to_thread(_confluent_wrong_password, bs, mechanism)
    auth = [e for e in errors if e.code() == ck.KafkaError._AUTHENTICATION]
    assert auth and "Authentication failed" in auth[0].str()

    with caplog.at_level(logging.WARNING, logger="kafka"):
        await asyncio.to_thread(_kafka_python_wrong_password, bs, mechanism)
    assert any("SaslAuthenticationFailedError" in r.getMessage() for r in caplog.records)

    producer = AIOKafkaProducer(bootstrap_servers=bs, request_timeout_ms=3000,
                                **sasl("aiokafka", mechanism, "alice", "wrong"))
    with pytest.raises(AioKafkaError):
        await producer.start()
    await producer.stop()
    assert await secure.services.log.list_topics() == []


# -- the wire before and during authentication ------------------------------------------------------


async def login(gw: Gateway, user: str, password: str):
    """A raw connection authenticated with SaslHandshake v1 and one SaslAuthenticate (PLAIN)."""
    conn = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
    hs = await call(conn, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert hs.error_code == KafkaError.none and "PLAIN" in hs.mechanisms
    auth = await call(conn, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})
    return conn, auth


async def test_only_the_handshake_is_served_before_authentication(secure):
    conn = await asyncio.open_connection("127.0.0.1", secure.listeners["kafka"].port)
    versions = await call(conn, ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= {k.api_key for k in versions.api_keys}
    with pytest.raises(asyncio.IncompleteReadError):
        await call(conn, ApiKey.METADATA, 9, {"topics": None})  # the gateway closes the connection
    hs = await call(await asyncio.open_connection("127.0.0.1", secure.listeners["kafka"].port),
                    ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert hs.error_code == KafkaError.unsupported_sasl_mechanism
    assert list(hs.mechanisms) == list(MECHANISMS)


async def test_with_authentication_off_sasl_offers_nothing(gateway):
    conn = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)
    hs = await call(conn, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert hs.error_code == KafkaError.unsupported_sasl_mechanism and list(hs.mechanisms) == []


async def test_a_failed_authentication_is_answered_then_the_connection_closed(secure):
    conn, auth = await login(secure, "alice", "wrong")
    assert auth.error_code == KafkaError.sasl_authentication_failed and "Authentication failed" in auth.error_message
    assert await asyncio.wait_for(conn[0].read(), TIMEOUT) == b""
    conn, auth = await login(secure, "nobody", "whatever")  # an unknown user reads the same
    assert auth.error_code == KafkaError.sasl_authentication_failed


async def test_the_unframed_v0_flow_closes_on_a_wrong_password(secure):
    reader, writer = await asyncio.open_connection("127.0.0.1", secure.listeners["kafka"].port)
    hs = await call((reader, writer), ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
    assert hs.error_code == KafkaError.none
    token = b"\0alice\0wrong"
    writer.write(len(token).to_bytes(4, "big") + token)
    assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""


async def test_the_unframed_v0_flow_closes_on_an_empty_token(secure, caplog):
    """An empty bare SASL message is a failed authentication, not a failed connection handler."""
    reader, writer = await asyncio.open_connection("127.0.0.1", secure.listeners["kafka"].port)
    hs = await call((reader, writer), ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
    assert hs.error_code == KafkaError.none
    writer.write((0).to_bytes(4, "big"))
    assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""
    assert not [r for r in caplog.records if r.exc_info]
    conn, auth = await login(secure, "alice", "alice-secret")  # everyone else is served as before
    assert auth.error_code == KafkaError.none


async def test_passwords_are_kept_as_scram_keys_only(secure, redis_url):
    r = redis_sync.Redis.from_url(redis_url)
    stored = r.hgetall(store_keys.sec_user("alice"))
    r.close()
    assert set(stored) == {b"created", b"scram-sha-256", b"scram-sha-512"}
    assert not any(b"alice-secret" in v for v in stored.values())
    assert all(v.startswith(b"salt=") and b"stored_key=" in v and b"iterations=4096" in v
               for k, v in stored.items() if k != b"created")


# -- authorization ------------------------------------------------------------------------------


def _requests() -> list[tuple[str, int, int, dict, object]]:
    """(what, api key, version, body, where the error code is) for one request of each kind."""
    batch = build_batch([(None, b"x", [])])
    return [
        ("produce", ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 1000, "transactional_id": None, "topic_data": [
            {"name": "orders", "partition_data": [{"index": 0, "records": batch}]}]},
         lambda r: r.responses[0].partition_responses[0].error_code),
        ("fetch", ApiKey.FETCH, 11, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                     "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
            {"topic": "orders", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]},
         lambda r: r.responses[0].partitions[0].error_code),
        ("list offsets", ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
         lambda r: r.topics[0].partitions[0].error_code),
        ("metadata", ApiKey.METADATA, 9, {"topics": [{"name": "orders"}], "allow_auto_topic_creation": False},
         lambda r: r.topics[0].error_code),
        ("find coordinator", ApiKey.FIND_COORDINATOR, 3, {"key": "billing", "key_type": 0},
         lambda r: r.error_code),
        ("join group", ApiKey.JOIN_GROUP, 5, {"group_id": "billing", "session_timeout": 10000,
                                              "rebalance_timeout": 10000, "member_id": "", "protocol_type": "consumer",
                                              "protocols": [{"name": "range", "metadata": b""}]},
         lambda r: r.error_code),
        ("offset commit", ApiKey.OFFSET_COMMIT, 8, {"group_id": "billing", "generation_id_or_member_epoch": -1,
                                                    "member_id": "", "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]},
         lambda r: r.topics[0].partitions[0].error_code),
        ("init producer id", ApiKey.INIT_PRODUCER_ID, 3, {"transactional_id": "payments", "transaction_timeout": 60000,
                                                          "producer_id": -1, "producer_epoch": -1},
         lambda r: r.error_code),
        ("create topics", ApiKey.CREATE_TOPICS, 5, {"topics": [{"name": "fresh", "num_partitions": 1,
                                                                "replication_factor": -1}], "timeout": 1000},
         lambda r: r.topics[0].error_code),
        ("describe configs", ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": 2, "resource_name": "orders", "configuration_keys": None}]},
         lambda r: r.results[0].error_code),
        ("describe cluster", ApiKey.DESCRIBE_CLUSTER, 0, {}, lambda r: r.error_code),
        ("list partition reassignments", ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout": 1000, "topics": None},
         lambda r: r.error_code),
        ("elect leaders", ApiKey.ELECT_LEADERS, 2, {"election_type": 0, "timeout": 1000, "topic_partitions": [
            {"topic": "orders", "partitions": [0]}]}, lambda r: r.replica_election_results[0].partition_result[0].error_code),
        ("alter partition reassignments", ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, {"timeout": 1000, "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "replicas": [0]}]}]},
         lambda r: r.responses[0].partitions[0].error_code),
    ]


DENIED = {
    "produce": KafkaError.topic_authorization_failed,
    "fetch": KafkaError.topic_authorization_failed,
    "list offsets": KafkaError.topic_authorization_failed,
    "metadata": KafkaError.topic_authorization_failed,
    "find coordinator": KafkaError.group_authorization_failed,
    "join group": KafkaError.group_authorization_failed,
    "offset commit": KafkaError.group_authorization_failed,
    "init producer id": KafkaError.transactional_id_authorization_failed,
    "create topics": KafkaError.topic_authorization_failed,
    "describe configs": KafkaError.topic_authorization_failed,
    # Kafka answers anyone (its cluster's authorized operations are 0): test_kafka_differential_acls
    "describe cluster": KafkaError.none,
    "list partition reassignments": KafkaError.cluster_authorization_failed,
    "elect leaders": KafkaError.cluster_authorization_failed,
    "alter partition reassignments": KafkaError.cluster_authorization_failed,
}


async def test_without_acls_every_api_answers_its_authorization_error(secure):
    await secure.services.log.create_topic("orders", 1)
    conn, auth = await login(secure, "alice", "alice-secret")
    assert auth.error_code == KafkaError.none
    for what, key, version, body, error_of in _requests():
        assert error_of(await call(conn, key, version, body)) == DENIED[what], what
    assert await secure.services.log.bounds("orders", 0) == (0, 0)  # nothing was written
    assert [t.name for t in await secure.services.log.list_topics()] == ["orders"]  # nor created


async def test_acls_allow_exactly_what_they_name(secure):
    await secure.services.log.create_topic("orders", 1)
    await secure.services.log.create_topic("secret", 1)
    alice = "User:alice"
    await allow(secure, alice, ResourceType.TOPIC, "orders", Operation.ALL)
    await allow(secure, alice, ResourceType.GROUP, "bill", Operation.READ, pattern="prefixed")
    await allow(secure, alice, ResourceType.TRANSACTIONAL_ID, "payments", Operation.WRITE)
    await allow(secure, alice, ResourceType.CLUSTER, "kafka-cluster", Operation.ADMIN)
    conn, _ = await login(secure, "alice", "alice-secret")
    for what, key, version, body, error_of in _requests():
        assert error_of(await call(conn, key, version, body)) not in set(DENIED.values()) - {KafkaError.none}, what
    # Metadata lists only what alice may describe: not "secret", nor "fresh" that admin on the
    # cluster let her create
    md = await call(conn, ApiKey.METADATA, 9, {"topics": None})
    assert sorted(t.name for t in md.topics) == ["orders"]
    assert sorted(t.name for t in await secure.services.log.list_topics()) == ["fresh", "orders", "secret"]
    md = await call(conn, ApiKey.METADATA, 9, {"topics": [{"name": "secret"}], "allow_auto_topic_creation": True})
    assert md.topics[0].error_code == KafkaError.topic_authorization_failed
    # a group outside the prefix, a transactional id not named
    find = await call(conn, ApiKey.FIND_COORDINATOR, 3, {"key": "audit", "key_type": 0})
    assert find.error_code == KafkaError.group_authorization_failed
    init = await call(conn, ApiKey.INIT_PRODUCER_ID, 3, {"transactional_id": "other", "transaction_timeout": 60000,
                                                         "producer_id": -1, "producer_epoch": -1})
    assert init.error_code == KafkaError.transactional_id_authorization_failed
    # removing an ACL takes effect at once on this gateway
    await secure.services.security.remove_acl(Acl(alice, ResourceType.TOPIC, "orders", Operation.ALL))
    what, key, version, body, error_of = _requests()[0]
    assert error_of(await call(conn, key, version, body)) == KafkaError.topic_authorization_failed


async def test_delegation_tokens_are_off_after_sasl(secure):
    """With SASL, a token request is told the feature is off, as Kafka without a token secret tells it
    (ControllerApis, KafkaApis.handleDescribeTokensRequest), after the check of CREATE_TOKENS for a
    token asked for another owner; the suite's Kafka broker shows the PLAINTEXT refusal
    (tests/test_java_admin_methods.py). The answers are read raw: kio refuses their -1 timestamps."""
    conn, _ = await login(secure, "alice", "alice-secret")

    async def first_fields(api_key: int, version: int, body: dict) -> tuple[int, int]:
        """(error code, the 64-bit field after it) of a flexible response: every token API's first two."""
        conn[1].write(request(build_request(api_key, version, body), 7))
        return struct.unpack_from(">hq", await read_response(conn[0]), 5)

    create = {"owner_principal_type": "User", "owner_principal_name": None, "renewers": [], "max_lifetime": -1}
    assert (await first_fields(ApiKey.CREATE_DELEGATION_TOKEN, 3, create))[0] == \
        KafkaError.delegation_token_auth_disabled
    for_bob = {**create, "owner_principal_name": "bob"}
    assert (await first_fields(ApiKey.CREATE_DELEGATION_TOKEN, 3, for_bob))[0] == \
        KafkaError.delegation_token_authorization_failed
    await allow(secure, "User:alice", ResourceType.USER, "User:bob", Operation.CREATE_TOKENS)
    assert (await first_fields(ApiKey.CREATE_DELEGATION_TOKEN, 3, for_bob))[0] == \
        KafkaError.delegation_token_auth_disabled
    disabled = (KafkaError.delegation_token_auth_disabled, -1)
    assert await first_fields(ApiKey.RENEW_DELEGATION_TOKEN, 2, {"hmac": b"x", "renew_period": 1}) == disabled
    assert await first_fields(ApiKey.EXPIRE_DELEGATION_TOKEN, 2, {"hmac": b"x", "expiry_time_period": 1}) == disabled
    describe = await call(conn, ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"owners": None})
    assert (describe.error_code, describe.tokens) == (KafkaError.delegation_token_auth_disabled, ())


@pytest.mark.kafka
async def test_real_clients_see_authorization_errors(secure):
    """confluent-kafka: a producer without write, a consumer without its group, a transactional
    producer without its transactional id, each gets the protocol's error."""
    bs = kafka_bootstrap(secure)
    await secure.services.log.create_topic("guarded", 1)
    creds = sasl("confluent", "SCRAM-SHA-256", "alice", "alice-secret")
    await allow(secure, "User:alice", ResourceType.TOPIC, "guarded", Operation.READ)

    def run() -> tuple[object, object, object]:
        results: list[object] = []
        p = ck.Producer({**creds, "bootstrap.servers": bs})
        p.produce("guarded", b"x", on_delivery=lambda err, msg: results.append(err))
        p.flush(TIMEOUT)
        c = ck.Consumer({**creds, "bootstrap.servers": bs, "group.id": "readers", "auto.offset.reset": "earliest"})
        c.subscribe(["guarded"])
        group_error = None
        deadline = time.monotonic() + TIMEOUT
        while group_error is None and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is not None:
                group_error = msg.error()
        c.close()
        t = ck.Producer({**creds, "bootstrap.servers": bs, "transactional.id": "payments"})
        try:
            t.init_transactions(TIMEOUT)
            txn_error = None
        except ck.KafkaException as exc:
            txn_error = exc.args[0]
        return results[0], group_error, txn_error

    produce_error, group_error, txn_error = await asyncio.to_thread(run)
    assert produce_error.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert group_error.code() == ck.KafkaError.GROUP_AUTHORIZATION_FAILED
    assert txn_error.code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


async def test_acls_changed_elsewhere_apply_within_the_cache_time(secure, redis_url):
    """Another gateway's authorizer (its own Store) sees an ACL added here once its cache expires."""
    other_store = Store.open(redis_url)
    other = SecurityService(other_store, enabled=True, cache_seconds=0.3)
    try:
        assert not await other.authorize("User:alice", ResourceType.TOPIC, "t", Operation.READ)
        await allow(secure, "User:alice", ResourceType.TOPIC, "t", Operation.READ)
        deadline = time.monotonic() + TIMEOUT
        while not await other.authorize("User:alice", ResourceType.TOPIC, "t", Operation.READ):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert not await other.authorize("User:alice", ResourceType.TOPIC, "t", Operation.WRITE)
        assert await other.authorize("User:alice", ResourceType.TOPIC, "t", Operation.DESCRIBE)  # read implies it
    finally:
        await other_store.close()


# -- the admin API and CLI ---------------------------------------------------------------------


def http(method: str, url: str, body: dict | None = None, *, user: str = "", password: str = "",
         token: str = "") -> tuple[int, object]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif user:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


async def test_the_admin_api_wants_an_admins_credential(secure):
    base = admin_url(secure)

    async def get(path: str, **auth: str) -> int:
        return (await asyncio.to_thread(http, "GET", base + path, **auth))[0]

    assert await get("/health") == 200  # open, for probes
    assert await get("/admin/v2/topics") == 401
    assert await get("/metrics") == 401
    assert await get("/admin/v2/topics", user="admin", password="wrong") == 401
    assert await get("/admin/v2/topics", user="alice", password="alice-secret") == 403
    assert await get("/admin/v2/topics", user="admin", password="admin-secret") == 200
    assert await get("/admin/v2/topics", token=ADMIN_TOKEN) == 200
    # a user's token works like its password, until it is revoked
    status, made = await asyncio.to_thread(http, "POST", base + "/admin/v2/users/admin/tokens", {}, token=ADMIN_TOKEN)
    assert status == 201
    assert await get("/admin/v2/users", token=made["token"]) == 200
    status, _ = await asyncio.to_thread(http, "DELETE", f"{base}/admin/v2/users/admin/tokens/{made['id']}",
                                        token=ADMIN_TOKEN)
    assert status == 200
    assert await get("/admin/v2/users", token=made["token"]) == 401
    # admin on the cluster makes alice an administrator
    await allow(secure, "User:alice", ResourceType.CLUSTER, "kafka-cluster", Operation.ADMIN)
    assert await get("/admin/v2/topics", user="alice", password="alice-secret") == 200


async def gateway_cli(gw: Gateway, *args: str, stdin: bytes = b"") -> tuple[int, object]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "admin", "--admin-url", admin_url(gw), "--token", ADMIN_TOKEN, *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    return proc.returncode or 0, json.loads(out) if proc.returncode == 0 else err.decode()


async def test_cli_manages_users_tokens_and_acls(secure):
    code, bob = await gateway_cli(secure, "users", "create", "bob", "--mechanism", "SCRAM-SHA-512",
                                  stdin=b"bob-secret\n")
    assert code == 0 and bob["mechanisms"] == ["SCRAM-SHA-512"]
    code, made = await gateway_cli(secure, "users", "create-token", "bob")
    assert code == 0 and await secure.services.security.check_token(made["token"]) == "User:bob"
    assert await secure.services.security.check_password("bob", "bob-secret") == "User:bob"
    code, acl = await gateway_cli(secure, "acls", "add", "--principal", "User:bob", "--topic", "logs-",
                                  "--prefixed", "--operation", "read")
    assert code == 0 and acl["added"] is True
    code, listed = await gateway_cli(secure, "acls", "list", "--principal", "User:bob")
    assert listed == [{"principal": "User:bob", "resource_type": "topic", "resource_name": "logs-",
                       "pattern": "prefixed", "operation": "read"}]
    assert await secure.services.security.authorize("User:bob", ResourceType.TOPIC, "logs-app", Operation.READ)
    code, users = await gateway_cli(secure, "users", "list")
    assert [u["name"] for u in users] == ["admin", "alice", "bob"] and len(users[2]["tokens"]) == 1
    code, _ = await gateway_cli(secure, "acls", "remove", "--principal", "User:bob", "--topic", "logs-",
                                "--prefixed", "--operation", "read")
    assert code == 0
    code, _ = await gateway_cli(secure, "users", "delete", "bob")
    assert code == 0
    with pytest.raises(Exception, match="invalid token"):
        await secure.services.security.check_token(made["token"])  # a deleted user's tokens go with it
    code, err = await gateway_cli(secure, "users", "describe", "bob")
    assert code != 0 and "NOT_FOUND" in err


# -- the native face ---------------------------------------------------------------------------


async def test_native_clients_connect_with_a_password_or_a_token(secure):
    url = native_url(secure)
    with pytest.raises(AuthenticationFailed):
        await Client.connect(url, reconnect=False)
    with pytest.raises(AuthenticationFailed):
        await Client.connect(url, username="alice", password="wrong", reconnect=False)
    with pytest.raises(AuthenticationFailed):
        await Client.connect(url, token="not-a-token", reconnect=False)
    _, token = await secure.services.security.create_token("admin")
    for creds in ({"username": "admin", "password": "admin-secret"}, {"token": token}):
        async with await Client.connect(url, reconnect=False, **creds) as client:
            consumer = await client.subscribe("native-auth", "s", initial_position="earliest")
            producer = await client.create_producer("native-auth")
            await producer.send(b"who goes there")
            assert (await consumer.receive(5)).value == b"who goes there"


async def test_native_requests_before_connect_get_an_error_and_a_close(secure):
    reader, writer = await asyncio.open_connection("127.0.0.1", secure.listeners["native"].port)
    writer.write(native_frame(pb.Request(request_id=3, create_producer=pb.CreateProducer(topic="t"))))
    (n,) = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), TIMEOUT))
    resp = pb.Response.FromString(await reader.readexactly(n))
    assert (resp.request_id, resp.error.code) == (3, ErrorCode.AUTHENTICATION_FAILED)
    assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""


async def test_native_acls_guard_producers_and_subscriptions(secure):
    url = native_url(secure)
    async with await Client.connect(url, username="alice", password="alice-secret", reconnect=False) as client:
        with pytest.raises(AuthorizationFailed):
            await client.create_producer("ledger")
        await allow(secure, "User:alice", ResourceType.TOPIC, "ledger", Operation.ALL)
        producer = await client.create_producer("ledger")
        await producer.send(b"entry")
        with pytest.raises(AuthorizationFailed):
            await client.subscribe("ledger", "audit", initial_position="earliest")
        await allow(secure, "User:alice", ResourceType.GROUP, "audit", Operation.READ)
        consumer = await client.subscribe("ledger", "audit", initial_position="earliest")
        assert (await consumer.receive(5)).value == b"entry"


async def test_native_transaction_keys_belong_to_their_user(secure):
    """alice's and admin's tasks may both call their key "job": neither fences the other."""
    url = native_url(secure)
    async with await Client.connect(url, username="alice", password="alice-secret", transaction_key="job",
                                    reconnect=False) as alice, \
            await Client.connect(url, username="admin", password="admin-secret", transaction_key="job",
                                 reconnect=False) as admin:
        assert (alice.epoch, admin.epoch) == (0, 0)
        await (await alice.new_transaction()).commit()
        await (await admin.new_transaction()).commit()
    keys = {s.name for s in await secure.services.fence.list()}
    assert keys == {"alice&job", "admin&job"}
