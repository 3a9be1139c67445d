"""Client quotas (KIP-546) against the real Kafka 4.4 broker: AlterClientQuotas and
DescribeClientQuotas answer alike on both, for entities of fresh names (Kafka's quotas outlive a
scenario), with defaults, strict and loose filters, and every refusal; controller mutation,
request-time and connection-rate quotas throttle alike."""

from __future__ import annotations

import asyncio
import io
import struct
import uuid
from typing import Any

import pytest
from kio.serial import entity_writer
from kio.static.primitive import Records

from gateway.formats.records import build_batch
from tests.conftest import eventually, flush, kafka_bootstrap, running_gateway, test_config
from tests.differential import Conn, Scenario, Side, compare, coordinators_ready, side
from tests.kafka_differences import plain
from tests.kafka_jvm import tools, unique
from tests.kafka_wire import build_request, decode, read_response, request
from tests.test_kafka_differential import T0, create

pytestmark = [pytest.mark.jvm, pytest.mark.kafka]

DESCRIBE, ALTER = 48, 49
EXACT, DEFAULT, SPECIFIED = 0, 1, 2
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def entity(**names: str | None) -> list[dict[str, Any]]:
    return [{"entity_type": t.replace("_", "-"), "entity_name": n} for t, n in names.items()]


def op(key: str, value: float | None) -> dict[str, Any]:
    return {"key": key, "value": value or 0.0, "remove": value is None}


async def alter(s: Side, entries: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]],
                validate_only: bool = False, version: int = 1) -> Any:
    answer = await s.call(ALTER, version, {"validate_only": validate_only, "entries": [
        {"entity": e, "ops": ops} for e, ops in entries]})
    for e in answer["entries"]:  # Kafka answers from hash maps; clients read the entities as maps
        e["entity"] = sorted(e["entity"], key=repr)
    answer["entries"] = sorted(answer["entries"], key=lambda e: repr(e["entity"]))
    return answer


async def describe(s: Side, components: list[tuple[str, int, str | None]], strict: bool = False,
                   version: int = 1) -> Any:
    answer = await s.call(DESCRIBE, version, {"strict": strict, "components": [
        {"entity_type": t, "match_type": m, "match": n} for t, m, n in components]})
    for e in answer["entries"] or ():
        e["entity"] = sorted(e["entity"], key=repr)
        e["values"] = sorted(e["values"], key=repr)
    if answer["entries"] is not None:
        answer["entries"] = sorted(answer["entries"], key=lambda e: repr(e["entity"]))
    return answer


async def described(s: Side, components: list[tuple[str, int, str | None]], count: int, strict: bool = False) -> Any:
    """The describe once the broker has learnt of the alterations before it (Kafka's brokers apply
    them from the metadata log a moment after the controller answers)."""
    async def seen() -> Any:
        answer = await describe(s, components, strict)
        return answer if len(answer["entries"] or ()) == count else None
    return await eventually(seen, 30, f"{count} quota entities")


@scenario
async def set_and_describe(s: Side, name: str) -> Any:
    client = f"{name}-c"
    altered = await alter(s, [
        (entity(user=name), [op("producer_byte_rate", 1024), op("consumer_byte_rate", 2048)]),
        (entity(user=name, client_id=client), [op("request_percentage", 12.5)]),
        (entity(client_id=client), [op("controller_mutation_rate", 3), op("producer_byte_rate", 10)]),
    ])
    loose = await described(s, [("user", EXACT, name)], 2)
    return [altered, loose,
            await describe(s, [("user", EXACT, name)], strict=True),
            await describe(s, [("user", EXACT, name), ("client-id", SPECIFIED, None)]),
            await describe(s, [("client-id", EXACT, client)]),
            await describe(s, [("client-id", EXACT, client)], strict=True),
            await describe(s, [("user", EXACT, name), ("client-id", EXACT, client)], strict=True),
            await describe(s, [("user", EXACT, f"{name}-none")])]


@scenario
async def defaults(s: Side, name: str) -> Any:
    altered = await alter(s, [
        (entity(user=None, client_id=name), [op("producer_byte_rate", 4096)]),
        (entity(user=name, client_id=None), [op("consumer_byte_rate", 8192)]),
    ])
    return [altered,
            await described(s, [("user", DEFAULT, None), ("client-id", EXACT, name)], 1),
            await described(s, [("user", EXACT, name), ("client-id", DEFAULT, None)], 1, strict=True),
            await describe(s, [("user", EXACT, name), ("client-id", SPECIFIED, None)], strict=True)]


@scenario
async def remove_and_change(s: Side, name: str) -> Any:
    await alter(s, [(entity(user=name), [op("producer_byte_rate", 100), op("consumer_byte_rate", 200)])])
    await described(s, [("user", EXACT, name)], 1)
    changed = await alter(s, [(entity(user=name), [op("producer_byte_rate", None), op("consumer_byte_rate", 300),
                                                   op("request_percentage", None)])])

    async def moved() -> Any:
        answer = await describe(s, [("user", EXACT, name)])
        return answer if answer["entries"] and len(answer["entries"][0]["values"]) == 1 else None
    after = await eventually(moved, 30, "the removal")
    await alter(s, [(entity(user=name), [op("consumer_byte_rate", None)])])
    gone = await described(s, [("user", EXACT, name)], 0)
    return [changed, after, gone]


@scenario
async def refused_alterations(s: Side, name: str) -> Any:
    return await alter(s, [
        (entity(user=f"{name}-1"), [op("no_such_quota", 1)]),
        (entity(user=f"{name}-2"), [op("producer_byte_rate", 1.5)]),
        (entity(user=f"{name}-3"), [op("producer_byte_rate", 1), op("producer_byte_rate", 2)]),
        ([], [op("producer_byte_rate", 1)]),
        (entity(topic=name), [op("producer_byte_rate", 1)]),
        (entity(user=""), [op("producer_byte_rate", 1)]),
        (entity(user=f"{name}-4", ip="127.0.0.1"), [op("producer_byte_rate", 1)]),
        (entity(ip="not an address"), [op("connection_creation_rate", 1)]),
        (entity(ip="127.0.0.9"), [op("producer_byte_rate", 1)]),
        (entity(client_id=f"{name}-5"), [op("connection_creation_rate", 1)]),
        (entity(user=f"{name}-6"), [op("request_percentage", 0.5)]),
        (entity(user=f"{name}-7"), [op("producer_byte_rate", None)]),
    ])


@scenario
async def validate_only(s: Side, name: str) -> Any:
    answer = await alter(s, [(entity(user=name), [op("producer_byte_rate", 1024)]),
                             (entity(user=f"{name}-x"), [op("nonsense", 1)])], validate_only=True)
    # a real change after it, which the describe awaits: the validated one must not be there
    await alter(s, [(entity(user=name, client_id=name), [op("producer_byte_rate", 1)])])
    return [answer, await described(s, [("user", EXACT, name)], 1)]


@scenario
async def refused_filters(s: Side, name: str) -> Any:
    return [await describe(s, components) for components in (
        [("", EXACT, name)],
        [("user", EXACT, name), ("user", DEFAULT, None)],
        [("topic", EXACT, name)],
        [("user", EXACT, None)],
        [("user", DEFAULT, name)],
        [("user", SPECIFIED, name)],
        [("user", 7, None)],
        [("ip", EXACT, "127.0.0.1"), ("user", EXACT, name)],
    )] + [await describe(s, [], strict=True)]


async def share_group(s: Side, name: str) -> uuid.UUID:
    """Topic and share group `name`, the group reading from the earliest offset and locking records
    for five seconds (long enough for a scenario's acknowledgement on a busy machine, short enough to
    await their expiry): the topic's id."""
    await coordinators_ready(s)
    await create(s, name, 1)
    configs = await s.call(44, 1, {"validate_only": False, "resources": [
        {"resource_type": 32, "resource_name": name, "configs": [
            {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"},
            {"name": "share.record.lock.duration.ms", "config_operation": 0, "value": "5000"}]}]})
    assert configs["responses"][0]["error_code"] == 0, configs
    return await s.topic_id(name)


async def share_member(s: Side, name: str) -> str:
    """A new member of share group `name`, once assigned the partition (Kafka reads a share
    partition only once the group has initialized its state)."""
    member, epoch = str(uuid.uuid4()), 0

    async def assigned() -> bool:
        nonlocal epoch
        beat = await s.call(76, 1, {"group_id": name, "member_id": member, "member_epoch": epoch,
                                    "subscribed_topic_names": [name]})
        assert beat["error_code"] == 0, beat
        epoch = beat["member_epoch"]
        return bool(beat["assignment"] and beat["assignment"]["topic_partitions"])
    await eventually(assigned, 30, "the partition assigned")
    return member


async def share_fetch(s: Side, conn: Conn, client: str, name: str, member: str, topic_id: uuid.UUID, epoch: int,
                      accept: tuple[int, int] | None = None, max_wait: int = 5000) -> Any:
    """A ShareFetch (v1) from `client` on `conn` (Kafka ends a share session with its connection)
    of partition 0, accepting the offsets `accept` spans."""
    acks = [] if accept is None else [{"first_offset": accept[0], "last_offset": accept[1], "acknowledge_types": [1]}]
    return await as_client(s, client, 78, 1, conn=conn, values={
        "group_id": name, "member_id": member, "share_session_epoch": epoch, "max_wait": max_wait, "min_bytes": 1,
        "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
        "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": acks}]}]})


async def produce_kb(s: Side, topic: str, n: int) -> None:
    """One batch of `n` records of 1000 bytes."""
    records = Records(build_batch([(None, b"s" * 1000, [])] * n, timestamp=T0))
    answer = await s.call(0, 9, {"acks": -1, "timeout": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0, answer


async def session_conn(s: Side) -> Conn:
    """A connection for one share session (Kafka ends the session with it, and mutes it when a
    response is throttled); the scenario's other calls go on another."""
    conn = await s.connect()
    await s.connect()
    return conn


def records_of(fetched: Any) -> list[tuple[int, int, int]]:
    """The acquired ranges of a ShareFetch answer (first, last, delivery count)."""
    return [(a["first_offset"], a["last_offset"], a["delivery_count"]) for t in fetched["responses"]
            for p in t["partitions"] for a in p["acquired_records"]]


@scenario
async def share_fetch_bytes(s: Side, name: str) -> Any:
    """KafkaApis.processShareFetchResponse under consumer_byte_rate 500 (five thousand bytes in the
    rate's first ten seconds): a 4 KB fetch is within it; the next, carrying the acknowledgement of
    the first and acquiring 3 KB more, is over it and answered as ShareSessionContext.throttleResponse
    answers, with a throttle time and no records, and only the outcome of its acknowledgement added
    back. The acknowledgement is applied and the 3 KB the throttled fetch acquired stay acquired,
    unsent, until their lock runs out: another member then gets them, and only them, as
    their second delivery."""
    client = f"{name}-s"
    await alter(s, [(entity(client_id=client), [op("consumer_byte_rate", 500)])])
    await described(s, [("client-id", EXACT, client)], 1)
    topic_id = await share_group(s, name)
    member = await share_member(s, name)
    conn = await session_conn(s)
    await produce_kb(s, name, 4)
    first = await share_fetch(s, conn, client, name, member, topic_id, 0)
    await produce_kb(s, name, 3)
    second = await share_fetch(s, conn, client, name, member, topic_id, 1, accept=(0, 3))
    throttled = second["throttle_time"] > 0
    second["throttle_time"] = throttled
    other, other_conn, epoch = await share_member(s, name), await session_conn(s), 0

    async def redelivered() -> Any:
        nonlocal epoch
        fetched = await share_fetch(s, other_conn, f"{name}-t", name, other, topic_id, epoch, max_wait=1000)
        epoch += 1
        return records_of(fetched)
    later = await eventually(redelivered, 30, "the records the throttled fetch acquired")
    return [records_of(first), first["throttle_time"] > 0, records_of(second), throttled, second, later]


@scenario
async def share_request_time(s: Side, name: str) -> Any:
    """request_percentage on the share APIs, on one share session: at 5% (half a second's work in the
    rate's first ten seconds) two ShareFetch long polls of a second on an empty partition are not
    throttled, their waits being purgatory's, not a handler's; at a thousandth of a percent a
    ShareFetch, a ShareAcknowledge and a ShareFetch of a wrong session epoch each carry a throttle
    time of at most a window (ClientRequestQuotaManager). The session's first ShareFetch comes from
    a client of no quota: Kafka's handler initializes the share partition in it."""
    waits, works = f"{name}-w", f"{name}-r"
    await alter(s, [(entity(client_id=waits), [op("request_percentage", 5)]),
                    (entity(client_id=works), [op("request_percentage", 0.001)])])
    await described(s, [("client-id", EXACT, waits)], 1)
    await described(s, [("client-id", EXACT, works)], 1)
    topic_id = await share_group(s, name)
    member = await share_member(s, name)
    conn = await session_conn(s)
    await share_fetch(s, conn, f"{name}-x", name, member, topic_id, 0, max_wait=0)
    polls = [await share_fetch(s, conn, waits, name, member, topic_id, epoch, max_wait=1000) for epoch in (1, 2)]
    fetched = await share_fetch(s, conn, works, name, member, topic_id, 3, max_wait=0)
    acked = await as_client(s, works, 79, 1, conn=conn, values={
        "group_id": name, "member_id": member, "share_session_epoch": 4,
        "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]})
    refused = await share_fetch(s, conn, works, name, member, topic_id, 9, max_wait=0)
    return [[(p["error_code"], p["throttle_time"] > 0, records_of(p)) for p in polls],
            [(a["error_code"], 0 < a["throttle_time"] <= 1000) for a in (fetched, acked, refused)]]


async def as_client(s: Side, client_id: str, api_key: int, version: int, values: dict[str, Any],
                    conn: Conn | None = None) -> Any:
    """One request from `client_id` (the quota entity), as plain data: on `conn`, or on a connection
    of its own, closed after it."""
    req = build_request(api_key, version, values)
    buf = io.BytesIO()
    entity_writer(type(req))(buf, req)
    cid = client_id.encode()
    head = struct.pack(">hhih", api_key, version, 7, len(cid)) + cid
    if req.__header_schema__.__flexible__:
        head += b"\0"
    own = conn is None
    conn = conn or await s.connect()
    reader, writer = conn
    try:
        writer.write(struct.pack(">i", len(head) + len(buf.getvalue())) + head + buf.getvalue())
        return plain(decode(api_key, version, await read_response(reader))[1])
    finally:
        if own:
            s.conns.remove(conn)  # the scenario's own calls go on on the connection before it
            writer.close()


@scenario
async def controller_mutations(s: Side, name: str) -> Any:
    """KIP-599 on topic creation, deletion and partition growth: a rate of one partition a second
    gives a burst of eleven; a strict request (CreateTopics v6+, DeleteTopics v5+, CreatePartitions
    v3) is refused THROTTLING_QUOTA_EXCEEDED once the bucket is below zero, an older one is served
    and throttled."""
    client = f"{name}-m"
    await alter(s, [(entity(client_id=client), [op("controller_mutation_rate", 1)])])
    await described(s, [("client-id", EXACT, client)], 1)

    async def create(topic: str, partitions: int, version: int = 7) -> Any:
        r = await as_client(s, client, 19, version, {"timeout": 30000, "validate_only": False, "topics": [
            {"name": topic, "num_partitions": partitions, "replication_factor": -1}]})
        return [[t["name"], t["error_code"]] for t in r["topics"]] + [r["throttle_time"] > 0]

    out = [await create(f"{name}-a", 11), await create(f"{name}-b", 2), await create(f"{name}-c", 1),
           await create(f"{name}-d", 1, version=5)]
    deleted = await as_client(s, client, 20, 6, {"timeout": 30000, "topics": [{"name": f"{name}-a"}]})
    grown = await as_client(s, client, 37, 3, {"timeout": 30000, "validate_only": False, "topics": [
        {"name": f"{name}-b", "count": 3, "assignments": None}]})
    return out + [[[t["name"], t["error_code"]] for t in deleted["responses"]], deleted["throttle_time"] > 0,
                  [[t["name"], t["error_code"]] for t in grown["results"]], grown["throttle_time"] > 0]


@scenario
async def request_time(s: Side, name: str) -> Any:
    """KIP-124: with a request_percentage of a thousandth of a percent, a few requests' time is over
    it and their responses, of any API, carry a throttle time of at most a window (1 s)."""
    client = f"{name}-r"
    await alter(s, [(entity(client_id=client), [op("request_percentage", 0.001)])])
    await described(s, [("client-id", EXACT, client)], 1)
    answers = [await as_client(s, client, 3, 12, {"topics": [], "allow_auto_topic_creation": False})
               for _ in range(4)] + [await as_client(s, client, 18, 3, {"client_software_name": "t",
                                                                         "client_software_version": "1"})]
    throttles = [a["throttle_time"] for a in answers]
    assert any(t > 0 for t in throttles), f"{s.name} never throttled"
    return [any(t > 0 for t in throttles), all(t <= 1000 for t in throttles), answers[-1]["error_code"]]


@scenario
async def connection_rate(s: Side, name: str) -> Any:
    """KIP-612: at connection_creation_rate 1 for 127.0.0.1, ten new connections are served and the
    next two are held and closed unanswered (ConnectionQuotas), each side's control connection
    (opened before) going on. The ip's quota is removed again: every test connects from it."""
    ip = entity(ip="127.0.0.1")
    await alter(s, [(ip, [op("connection_creation_rate", 1)])])
    try:
        await described(s, [("ip", EXACT, "127.0.0.1")], 1)
        # brokers apply metadata in order: once a later alteration is seen, the ip's quota is in force
        await alter(s, [(entity(client_id=f"{name}-after"), [op("producer_byte_rate", 1e9)])])
        await described(s, [("client-id", EXACT, f"{name}-after")], 1)
        host, port = s.bootstrap.rsplit(":", 1)
        served = []
        for _ in range(12):
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                writer.write(request(build_request(18, 0), 1))
                await read_response(reader)
                served.append("answered")
            except (asyncio.IncompleteReadError, ConnectionError):
                served.append("closed")
            finally:
                writer.close()
        assert served == ["answered"] * 10 + ["closed"] * 2, f"{s.name}: {served}"
        return served
    finally:
        await alter(s, [(ip, [op("connection_creation_rate", None)])])
        await described(s, [("ip", EXACT, "127.0.0.1")], 0)


@pytest.fixture(scope="module")
async def gateway_bs(redis_server: str) -> Any:
    flush(redis_server)
    async with running_gateway(test_config(redis_server, group_share_min_record_lock_duration_ms=5000)) as gw:
        yield kafka_bootstrap(gw)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_kafka_and_the_gateway_answer_alike(name: str, kafka_broker: Any, gateway_bs: str) -> None:
    await compare(SCENARIOS[name], kafka_broker.bootstrap, gateway_bs, f"q-{name.replace('_', '-')}"[:30])


def configs(bs: str, *args: str) -> list[str]:
    return ["kafka-configs", "--bootstrap-server", bs, *args]


async def test_kafka_configs_sets_and_shows_quotas_as_on_kafka(kafka_broker: Any, gateway_bs: str) -> None:
    """Kafka's own kafka-configs, --entity-type users and clients (and both, and a default), altering
    and describing on each broker; what it prints is compared, each describe once the broker serves
    the alterations before it."""
    user, client = unique("q-user"), unique("q-client")
    u, c = ["--entity-type", "users", "--entity-name", user], ["--entity-type", "clients", "--entity-name", client]

    async def run(bs: str) -> list[str]:
        altered = await tools(
            configs(bs, *u, "--alter", "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048"),
            configs(bs, *u, *c, "--alter", "--add-config", "request_percentage=50"),
            configs(bs, *u, "--entity-type", "clients", "--entity-default", "--alter", "--add-config",
                    "producer_byte_rate=4096"),
            configs(bs, *c, "--alter", "--add-config", "controller_mutation_rate=2.5"),
            configs(bs, *c, "--alter", "--add-config", "producer_byte_rate=1.5"),
            configs(bs, *u, "--alter", "--delete-config", "consumer_byte_rate"))
        async with side("x", bs) as s:
            await described(s, [("user", EXACT, user)], 3)

            async def deleted() -> bool:
                answer = await describe(s, [("user", EXACT, user)], strict=True)
                return len(answer["entries"][0]["values"]) == 1
            await eventually(deleted, 30, "the deletion")
        shown = await tools(configs(bs, *u, "--describe"), configs(bs, *u, "--entity-type", "clients", "--describe"),
                            configs(bs, *c, "--describe"), configs(bs, "--entity-type", "users", "--describe"))
        # each describe's entities sorted: Kafka lists them in its quota map's hash order, which the
        # random names change from run to run (docs/kafka-differences.md, "Client quotas")
        return [f"exit {r.exit}\n" + "\n".join(line.replace(bs, "<broker>") for line in r.out.splitlines()
                                             if not line.startswith("\t"))  # a refusal's stack trace
                for r in altered] + [
            f"exit {r.exit}\n" + "\n".join(sorted(r.out.splitlines())) for r in shown[:3]] + [
            "\n".join(sorted(line for line in shown[3].out.splitlines() if user in line))]

    on_kafka, on_gateway = await run(kafka_broker.bootstrap), await run(gateway_bs)
    assert on_gateway == on_kafka, "\n----\n".join(on_kafka + on_gateway)
    assert "producer_byte_rate=1024.0" in on_gateway[6]
