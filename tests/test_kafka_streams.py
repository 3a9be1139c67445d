"""Kafka Streams 4.4, unchanged, on the classic group protocol: a stateful exactly-once application
(tests/jvm/.../StreamsApp.java) run as two instances, one SIGKILLed mid-run and restarted with its
state directory wiped, the other stopped until its group drops it and resumed as a zombie, then one
alone restoring every store from the changelogs; what it wrote, read `read_committed`, must be
exactly what its input implies. Under the streams protocol, both instances' Interactive Queries
(`application.server`) must name the hosts the group's assignment implies. The same scenario runs
against the real Kafka 4.4 broker, so a failure says whose it is; so does a missing source topic,
whose error must be Kafka's."""

from __future__ import annotations

import asyncio
import itertools
import random
import re
import shutil
import signal
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from gateway.formats.partitioner import partition_for_key
from gateway.server.gateway import Gateway
from tests.conftest import GatewayProcess, eventually, kafka_bootstrap, running_gateway, test_config
from tests.kafka_clients import TIMEOUT, create_topic
from tests.kafka_jvm import SUITE_SETTINGS, java_command, same_on_both, tools, unique
from tests.kafka_wire import call
from tests.sasl_pair import acls_listed, login, sasl_pair
from tests.test_kafka_share import group_configs

pytestmark = [pytest.mark.jvm, pytest.mark.kafka, pytest.mark.slow, pytest.mark.apps]

USERS = [f"user-{i}" for i in range(6)]
PAGES = [f"page-{i}" for i in range(4)]
REGIONS = {user: ("north", "south", "east")[i % 3] for i, user in enumerate(USERS)}
OUTPUTS = ("counts", "windowed", "pages", "joined")
WINDOW_MS = 10_000

# Streams' own replication.factor (-1: the broker's default) is left as it is: both brokers take it
SETTINGS = [
    "processing.guarantee=exactly_once_v2",
    "statestore.cache.max.bytes=0",  # every update goes out, so the output is one record per input
    "repartition.purge.interval.ms=0",  # purged at each commit, so every partition is by the end
    "session.timeout.ms=6000",  # the killed instance's tasks move on in seconds, not 45
    "heartbeat.interval.ms=1000",
]

# KIP-1071's streams protocol: sessions and heartbeats are the group's (the broker's
# group.streams.* settings), which a Streams client may not set
STREAMS_SETTINGS = [*SETTINGS[:3], "group.protocol=streams"]

# the group's own session timeout (its streams.session.timeout.ms, IncrementalAlterConfigs on
# its GROUP resource), so that the killed instance's tasks move on in seconds, not 45: both
# brokers allow as little as 6 s (group.streams.min.session.timeout.ms); 10 s leaves a member
# heartbeating every 5 s (group.streams.min.heartbeat.interval.ms) room for a late one
STREAMS_SESSION_MS = 10_000
STREAMS_MIN_SESSION_MS = int(SUITE_SETTINGS["group.streams.min.session.timeout.ms"])


def settings(protocol: str) -> list[str]:
    return STREAMS_SETTINGS if protocol == "streams" else SETTINGS


Click = tuple[str, str, int]  # user, page, timestamp (ms)


_PICK = random.Random(30)
VISITS = [(_PICK.choice(USERS), _PICK.choice(PAGES)) for _ in range(240)]  # the same in every run


def clicks(first: int, count: int, t0: int) -> list[Click]:
    """Clicks `first`..`first+count-1` of a fixed sequence, one a second from `t0`."""
    return [(*VISITS[i], t0 + i * 1000) for i in range(first, first + count)]


def expected(done: list[Click]) -> dict[str, dict[str, list[str]]]:
    """Every output topic's values per key, in order, that `done` (every click so far) implies:
    one update per click, since the application caches nothing."""
    out: dict[str, dict[str, list[str]]] = {name: defaultdict(list) for name in OUTPUTS}
    per_user: Counter[str] = Counter()
    per_page: Counter[str] = Counter()
    windows: dict[str, list[str]] = defaultdict(list)
    for user, page, ts in done:
        per_user[user] += 1
        per_page[page] += 1
        window = f"{user}@{ts // WINDOW_MS * WINDOW_MS}"
        windows[window].append(page)
        out["counts"][user].append(str(per_user[user]))
        out["joined"][user].append(f"{REGIONS[user]}:{per_user[user]}")
        out["windowed"][window].append(",".join(windows[window]))
        out["pages"][page].append(str(per_page[page]))
    return {name: dict(values) for name, values in out.items()}


@dataclass
class Instance:
    """One StreamsApp process: its stdout lines as they come, its log in a file."""

    proc: asyncio.subprocess.Process
    log: IO[bytes]
    lines: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None
    answers: asyncio.Queue[list[str]] = field(default_factory=asyncio.Queue)

    @classmethod
    async def start(cls, bs: str, app: str, state_dir: Path, log: IO[bytes], protocol: str = "classic",
                    extra: tuple[str, ...] = ()) -> Instance:
        proc = await asyncio.create_subprocess_exec(
            *java_command("gateway.jvm.StreamsApp", bs, app, str(state_dir), *settings(protocol), *extra),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log)
        instance = cls(proc, log)
        instance.reader = asyncio.create_task(instance._read())
        return instance

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        block: list[str] = []
        async for line in self.proc.stdout:
            self.lines.append(line.decode().rstrip("\n"))
            if self.lines[-1].startswith(("client ", "key ")):
                block.append(self.lines[-1])
            elif self.lines[-1] == "metadata end":
                self.answers.put_nowait(block)
                block = []

    async def metadata(self) -> list[str]:
        """What its Interactive Queries know now: a `client HOST:PORT active=... standby=...` line
        per client, then `key USER HOST:PORT` per user, the host of that user's count."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"metadata\n")
        await self.proc.stdin.drain()
        return await asyncio.wait_for(self.answers.get(), 30)

    def kill(self) -> None:
        self.proc.kill()

    async def close(self) -> list[str]:
        """Close its stdin, which closes the application and leaves the group; what it printed."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        await asyncio.wait_for(self.proc.wait(), 90)
        assert self.reader is not None
        await self.reader
        return self.lines


class Reader:
    """A read_committed consumer of some of the application's topics (two partitions each): each
    topic's records in the order read, so per key in the order written."""

    def __init__(self, bs: str, app: str, names: tuple[str, ...] = OUTPUTS) -> None:
        self.consumer = AIOKafkaConsumer(bootstrap_servers=bs, isolation_level="read_committed",
                                         enable_auto_commit=False)
        self.app = app
        self.names = names
        self.records: dict[str, list[tuple[bytes, bytes]]] = {name: [] for name in names}

    async def start(self) -> Reader:
        await self.consumer.start()
        partitions = [TopicPartition(f"{self.app}-{name}", p) for name in self.names for p in range(2)]
        self.consumer.assign(partitions)
        await self.consumer.seek_to_beginning(*partitions)
        return self

    async def poll(self) -> None:
        batches = await self.consumer.getmany(timeout_ms=200)
        for tp, records in batches.items():
            self.records[tp.topic.removeprefix(f"{self.app}-")] += [(r.key, r.value) for r in records]

    def seen(self) -> dict[str, dict[str, list[str]]]:
        """Each topic's values per key, in order."""
        out: dict[str, dict[str, list[str]]] = {}
        for name, records in self.records.items():
            out[name] = defaultdict(list)
            for key, value in records:
                out[name][key.decode()].append(value.decode())
        return {name: dict(values) for name, values in out.items()}

    async def reached(self, want: dict[str, dict[str, list[str]]]) -> bool:
        """Whether every key's latest value is the last one `want` names for it."""
        await self.poll()
        seen = self.seen()
        return all(seen[name].get(key, [None])[-1] == values[-1]
                   for name in self.names for key, values in want[name].items())

    async def to_end(self) -> Reader:
        """Everything up to the last stable offsets."""
        partitions = list(self.consumer.assignment())
        end = await self.consumer.end_offsets(partitions)
        while [tp for tp in partitions if await self.consumer.position(tp) < end[tp]]:
            await self.poll()
        return self

    async def stop(self) -> None:
        await self.consumer.stop()


def endpoint(instance: str) -> tuple[str, ...]:
    """The `application.server` of instance a or b, which Interactive Queries name it by."""
    return (f"application.server=localhost:{7001 if instance == 'a' else 7002}",)


async def described_endpoints(bs: str, app: str) -> list[str] | None:
    """The Interactive Queries map StreamsGroupDescribe's assignment implies, in StreamsApp's
    `metadata` lines (each endpoint's members' active and standby tasks' source partitions, the
    host of each user's count by the default partitioner), or None while the group is not stable."""
    host, port = bs.rsplit(":", 1)
    conn = await asyncio.open_connection(host, int(port))
    try:
        described = (await call(conn, 89, 0, {"group_ids": [app], "include_authorized_operations": False})).groups[0]
    finally:
        conn[1].close()
    if described.group_state != "Stable" or described.topology.subtopologies is None:
        return None
    sources = {s.subtopology_id: [*s.source_topics, *(t.name for t in s.repartition_source_topics)]
               for s in described.topology.subtopologies}
    held: dict[str, dict[str, set[str]]] = defaultdict(lambda: {"active": set(), "standby": set()})
    for m in described.members:
        where = f"{m.user_endpoint.host}:{m.user_endpoint.port}"
        for role, tasks in (("active", m.assignment.active_tasks),
                            ("standby", (*m.assignment.standby_tasks, *m.assignment.warmup_tasks))):
            held[where][role] |= {f"{t}-{p}" for task in tasks for t in sources[task.subtopology_id]
                                  for p in task.partitions}
    lines = sorted(f"client {where} active={','.join(sorted(h['active']))} standby={','.join(sorted(h['standby']))}"
                   for where, h in held.items())
    owner = {tp: where for where, h in held.items() for tp in h["active"]}
    return lines + [f"key {user} {owner[f'{app}-clicks-{partition_for_key(user.encode(), 2)}']}" for user in USERS]


async def begun(outputs: Reader, counted: int) -> bool:
    """Whether more than `counted` clicks have been counted (one count out per click)."""
    await outputs.poll()
    return len(outputs.records["counts"]) > counted


async def changelog_records(bs: str, app: str, store: str) -> int:
    """How many records a store's changelog holds now: fewer than it was sent once compacted."""
    reader = await Reader(bs, app, (f"{store}-changelog",)).start()
    try:
        return len((await reader.to_end()).records[f"{store}-changelog"])
    finally:
        await reader.stop()


async def produce(bs: str, topic: str, records: list[Click]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bs, enable_idempotence=True)
    await producer.start()
    try:
        for key, value, ts in records:
            await producer.send(topic, value.encode(), key=key.encode(), timestamp_ms=ts)
        await producer.flush()
    finally:
        await producer.stop()


async def group_size(bs: str, group: str, members: int) -> bool:
    """Whether the classic group is stable with `members` members."""
    import confluent_kafka as ck
    import confluent_kafka.admin as cka

    admin = cka.AdminClient({"bootstrap.servers": bs})
    described = await asyncio.to_thread(admin.describe_consumer_groups([group])[group].result, TIMEOUT)
    return described.state == ck.ConsumerGroupState.STABLE and len(described.members) == members


async def group_type(bs: str, group: str) -> str:
    """The group's type as ListGroups v5 names it: classic, or streams for KIP-1071's protocol."""
    host, port = bs.rsplit(":", 1)
    conn = await asyncio.open_connection(host, int(port))
    try:
        listed = await call(conn, 16, 5, {"states_filter": [], "types_filter": []})
    finally:
        conn[1].close()
    return next(g.group_type for g in listed.groups if g.group_id == group)


def beginning_offsets(bs: str, topic: str, partitions: int = 2) -> list[int]:
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": "unused"})
    try:
        return [consumer.get_watermark_offsets(ck.TopicPartition(topic, p), TIMEOUT)[0] for p in range(partitions)]
    finally:
        consumer.close()


def configs(policy: str, retention_ms: int = 604800000, segment_bytes: int = 1073741824) -> dict[str, str]:
    return {"cleanup.policy": policy, "retention.ms": str(retention_ms), "segment.bytes": str(segment_bytes),
            "message.timestamp.type": "CreateTime"}


# what Streams creates for the topology (InternalTopicManager): a compacted changelog per store, the
# windowed one also deleting after the window's size, grace and windowstore.changelog.additional.
# retention.ms; the repartition topic kept until Streams purges it, in 50 MB segments
INTERNAL_TOPICS = {
    "counts-changelog": configs("compact"),
    "joined-changelog": configs("compact"),
    "pages-changelog": configs("compact"),
    "pages-repartition": configs("delete", -1, 52428800),
    "regions-changelog": configs("compact"),
    "windowed-changelog": configs("compact,delete", WINDOW_MS + 86400000 + 86400000),
}
INTERNAL_CONFIGS = ("cleanup.policy", "retention.ms", "segment.bytes", "message.timestamp.type")


async def internal_topics(bs: str, app: str) -> dict[str, dict[str, str]]:
    """The topics the application created for itself, with the configs Streams sets on them."""
    import confluent_kafka.admin as cka

    admin = cka.AdminClient({"bootstrap.servers": bs})
    listed = await asyncio.to_thread(admin.list_topics, timeout=TIMEOUT)
    ours = {f"{app}-{name}" for name in ("clicks", "regions", *OUTPUTS)}
    names = sorted(t for t in listed.topics if t.startswith(f"{app}-") and t not in ours)
    futures = admin.describe_configs([cka.ConfigResource(cka.ResourceType.TOPIC, t) for t in names])
    described = {r.name: await asyncio.to_thread(f.result, TIMEOUT) for r, f in futures.items()}
    return {name.removeprefix(f"{app}-"): {k: described[name][k].value for k in INTERNAL_CONFIGS}
            for name in names}


async def prepared(bs: str, prefix: str, first: int) -> tuple[str, int, list[Click], Reader]:
    """A new application's topics, its regions and its first `first` clicks in, and a reader of its
    outputs: the application's name, its clicks' first timestamp, the clicks, the reader."""
    app = unique(prefix)
    for topic in ("clicks", "regions", *OUTPUTS):
        await create_topic(bs, f"{app}-{topic}", 2)
    t0 = int(time.time() * 1000) // WINDOW_MS * WINDOW_MS - 600_000
    await produce(bs, f"{app}-regions", [(user, region, t0 - 1000) for user, region in REGIONS.items()])
    done = clicks(0, first, t0)
    await produce(bs, f"{app}-clicks", done)
    return app, t0, done, await Reader(bs, app).start()


def show(log: IO[bytes]) -> None:
    """The end of the instances' log, for a failed run."""
    log.seek(0)
    print(log.read().decode(errors="replace")[-20000:])


async def wind_up(log: IO[bytes], outputs: Reader, *instances: Instance) -> None:
    """Kill the instances still running, stop the reader, close the log."""
    for instance in instances:
        if instance.proc.returncode is None:
            instance.kill()
            await instance.proc.wait()
    await outputs.stop()
    log.close()


async def exactly_once_run(bs: str, tmp: Path, compacts: bool, protocol: str = "classic") -> None:
    """The whole scenario on one broker; with `compacts`, the changelogs are compacted before the
    stores are restored from them. With the streams protocol the stopped instance's stage is left
    out: it waits for the group to drop a member, which describing a classic group tells."""
    app, t0, done, outputs = await prepared(bs, "streams", 60)
    if protocol == "streams":
        await group_configs(bs, app, streams_session_timeout_ms=str(STREAMS_SESSION_MS))
    log = tempfile.TemporaryFile(dir=tmp)
    a_dir, b_dir = tmp / "a", tmp / "b"
    a = await Instance.start(bs, app, a_dir, log, protocol, endpoint("a"))
    b = await Instance.start(bs, app, b_dir, log, protocol, endpoint("b"))
    try:
        await eventually(lambda: outputs.reached(expected(done)), 120, "the first clicks counted")
        assert await group_type(bs, app) == protocol
        if protocol == "streams":  # Interactive Queries: the endpoint map the heartbeats carry
            async def agreed() -> bool:
                want = await described_endpoints(bs, app)
                return want is not None and await a.metadata() == await b.metadata() == want

            await eventually(agreed, 60, "both instances' Interactive Queries agreeing with the assignment")

        # the second clicks: instance a is SIGKILLed once they begin to show, then restarted
        # with its state directory wiped
        more = clicks(60, 60, t0)
        await produce(bs, f"{app}-clicks", more)
        done += more

        await eventually(lambda: begun(outputs, len(done) - 60), 60, "the second clicks begun")
        a.kill()
        await a.proc.wait()
        shutil.rmtree(a_dir)
        a = await Instance.start(bs, app, a_dir, log, protocol, endpoint("a"))
        await eventually(lambda: outputs.reached(expected(done)), 120, "the second clicks counted")

        # the third clicks: b is stopped once they begin to show, until the group has dropped it,
        # then goes on as a zombie whose transaction and offsets the group's generation fences
        more = clicks(120, 60, t0)
        await produce(bs, f"{app}-clicks", more)
        done += more
        if protocol == "classic":
            await eventually(lambda: begun(outputs, len(done) - 60), 60, "the third clicks begun")
            b.proc.send_signal(signal.SIGSTOP)
            await eventually(lambda: group_size(bs, app, 1), 60, "the stopped instance dropped from the group")
            b.proc.send_signal(signal.SIGCONT)
        await eventually(lambda: outputs.reached(expected(done)), 120, "the third clicks counted")

        # b leaves: a alone holds every task, its stores restored from the changelogs, compacted
        # by then where the broker compacts an active log as the gateway does
        if compacts:
            async def compacted() -> bool:
                return await changelog_records(bs, app, "counts") < len(done)

            await eventually(compacted, 60, "the counts' changelog compacted")
        await b.close()
        more = clicks(180, 60, t0)
        await produce(bs, f"{app}-clicks", more)
        done += more
        await eventually(lambda: outputs.reached(expected(done)), 120, "the last clicks counted")
        await a.close()
        result = (await outputs.to_end()).seen()
    except BaseException:
        show(log)
        raise
    finally:
        await wind_up(log, outputs, a, b)
    assert result == expected(done)
    assert await internal_topics(bs, app) == INTERNAL_TOPICS
    # the records Streams has read from its repartition topic are purged (DeleteRecords)
    assert 0 not in await asyncio.to_thread(beginning_offsets, bs, f"{app}-pages-repartition")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", ["classic", "streams"])
async def test_exactly_once_application_on_kafka(kafka_broker, tmp_path, protocol):
    """The reference: Kafka's log cleaner leaves the active segment alone, so nothing compacts. A
    fresh Kafka 4.4 broker serves the streams protocol as it comes (streams.version 1 finalized,
    group.coordinator.rebalance.protocols listing streams), so the gateway serves it always too."""
    await exactly_once_run(kafka_broker.bootstrap, tmp_path, compacts=False, protocol=protocol)


@pytest.fixture
async def compacting_gateway(redis_url: str) -> AsyncIterator[Gateway]:
    """A gateway whose cleaner passes every half second, so changelogs compact while Streams runs,
    and whose streams groups may set a session timeout as short as the suite's Kafka broker allows."""
    config = test_config(redis_url, cleaner_interval=0.5, group_streams_min_session_timeout_ms=STREAMS_MIN_SESSION_MS)
    async with running_gateway(config) as gw:
        yield gw


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", ["classic", "streams"])
async def test_exactly_once_application(compacting_gateway, tmp_path, protocol):
    """On the gateway, whose cleaner compacts the changelogs before the stores are restored; with
    the classic group protocol and with KIP-1071's streams protocol."""
    await exactly_once_run(kafka_bootstrap(compacting_gateway), tmp_path, compacts=True, protocol=protocol)


async def missing_source_run(bs: str, tmp: Path, protocol: str = "classic", extra: tuple[str, ...] = (),
                             app: str = "") -> list[str]:
    """The application started before its source topics exist (or denied them): the error it
    stops with."""
    app = app or unique("streams-missing")
    with tempfile.TemporaryFile(dir=tmp) as log:
        instance = await Instance.start(bs, app, tmp / f"state-{protocol}", log, protocol, extra)
        await asyncio.wait_for(instance.proc.wait(), 90)
        assert instance.reader is not None
        await instance.reader
    # the client's own wait, in milliseconds as it measured it, differs from run to run
    return [re.sub(r"after \d+ms", "after <ms>ms", line.replace(app, "APP"))
            for line in instance.lines if line.startswith("error ")]


@pytest.mark.parametrize("protocol", ["classic", "streams"])
async def test_missing_source_topic(gateway, kafka_broker, tmp_path, protocol):
    """Streams' consumer asks for no topic creation, so the application stops, as on Kafka; with the
    streams protocol, told so by the coordinator's MISSING_SOURCE_TOPICS status."""
    errors = await same_on_both(gateway, kafka_broker, lambda bs: missing_source_run(bs, tmp_path, protocol))
    assert errors and "MissingSourceTopicException" in errors[0]


@pytest.mark.timeout(240)
async def test_a_gateway_killed_under_the_streams_protocol_loses_nothing(gateway_process: GatewayProcess,
                                                                          tmp_path: Path):
    """The gateway SIGKILLed while an exactly-once application on KIP-1071's streams protocol is
    counting, and started again on its ports and data: the group, its tasks and the open
    transaction are all in Redis, so the application carries on, and what it wrote, read
    `read_committed`, is exactly what its input implies (no count lost or doubled)."""
    gateway_process.start()
    bs = gateway_process.kafka_bootstrap
    app, t0, done, outputs = await prepared(bs, "streams-kill", 40)
    log = tempfile.TemporaryFile(dir=tmp_path)
    instance = await Instance.start(bs, app, tmp_path / "state", log, "streams")
    try:
        await eventually(lambda: outputs.reached(expected(done)), 120, "the first clicks counted")
        more = clicks(40, 80, t0)
        await produce(bs, f"{app}-clicks", more)
        done += more
        await eventually(lambda: begun(outputs, len(done) - 80), 60, "the second clicks begun")
        await outputs.stop()
        gateway_process.kill()
        await asyncio.to_thread(gateway_process.start)
        outputs = await Reader(bs, app).start()
        await eventually(lambda: outputs.reached(expected(done)), 120, "the second clicks counted")
        assert await group_type(bs, app) == "streams"
        await instance.close()
        result = (await outputs.to_end()).seen()
    except BaseException:
        show(log)
        raise
    finally:
        await wind_up(log, outputs, instance)
    assert result == expected(done)


HEARTBEAT_DENIED = "TopicAuthorizationException: Topic authorization failed."
METADATA_DENIED = ("TopicAuthorizationException: Not authorized to access topics: "
                   "[APP-clicks, APP-pages-repartition, APP-regions]")


@pytest.mark.timeout(300)
async def test_an_application_denied_by_acls_fails_as_on_kafka(redis_server: str, tmp_path: Path):
    """The application logged in as `alice` on a SASL Kafka 4.4 broker with StandardAuthorizer and
    on a gateway with authentication on, with both group protocols: with every right on its topics
    but none on its group, and with every right on its group but none on its topics; the errors it
    stops with compared. (With no ACL at all, the consumer's metadata and its FindCoordinator fail
    at once, and which error stops the application is a race in the client, on either broker. With
    the streams protocol and no right on its topics, the consumer's Metadata and its
    StreamsGroupHeartbeat both fail: the client stops with whichever answer comes first, the
    Metadata's "Not authorized to access topics: [...]" or the heartbeat's error code with the
    client's own "Topic authorization failed.", so for that case both are taken as one.)"""
    seen: dict[str, list[str]] = {}
    alice = tuple(f"{k}={v}" for k, v in login("alice").items())
    admin = tmp_path / "admin.properties"
    admin.write_text("".join(f"{k}={v}\n" for k, v in login("admin").items()))
    cases = list(itertools.product(("topic", "group"), ("classic", "streams")))
    async with sasl_pair(redis_server, tmp_path) as bootstraps:
        for name, bs in bootstraps.items():
            apps = [unique("streams-denied") for _ in cases]
            runs = await tools(*(["kafka-acls", "--bootstrap-server", bs, "--command-config", str(admin), "--add",
                                  "--allow-principal", "User:alice", "--operation", "All",
                                  "--resource-pattern-type", "prefixed", f"--{allowed}", app]
                                 for app, (allowed, _) in zip(apps, cases, strict=True)))
            assert all(r.exit == 0 for r in runs), [r.out for r in runs]
            await acls_listed(bs, len(apps))
            for app in apps:
                (tmp_path / app).mkdir()
            outcomes = [await missing_source_run(bs, tmp_path / app, protocol, alice, app)
                        for app, (_, protocol) in zip(apps, cases, strict=True)]
            for (allowed, protocol), errors in zip(cases, outcomes, strict=True):
                # the client lists the topics in its hash set's order, which differs from run to run
                errors = [re.sub(r"\[([^]]*)\]", lambda m: "[" + ", ".join(sorted(m[1].split(", "))) + "]", e)
                          for e in errors]
                if (allowed, protocol) == ("group", "streams"):
                    errors = [e.replace(HEARTBEAT_DENIED, METADATA_DENIED) for e in errors]
                seen.setdefault(name, []).append(f"{allowed} only, {protocol}: {errors}")
    assert all("AuthorizationException" in line for line in seen["kafka"]), seen
    assert seen["gateway"] == seen["kafka"]
