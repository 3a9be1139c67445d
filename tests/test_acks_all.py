"""acks=all and min.insync.replicas over a real Redis replica: the produce is answered once Redis's
WAIT says the replicas hold the batches; with too few replicas online it is refused before anything
is written; a replica that stops answering makes the produce fail after the append, and the
idempotent producer's retry stores nothing twice."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import confluent_kafka as ck
import pytest
import redis as redis_sync
from kio.schema.errors import ErrorCode as KafkaError

from gateway.client import Client, NotEnoughReplicas
from gateway.domain import features
from gateway.domain.fence import full_key
from gateway.domain.log import LogService
from gateway.errors import ReplicationTimedOut, StorageUnavailable
from gateway.formats.records import build_batch
from gateway.kafka.dispatch import ApiKey
from gateway.server.gateway import Gateway
from gateway.store import Store, keys
from gateway.store.embedded import EmbeddedCluster, EmbeddedRedis
from gateway.store.groups import CommittedOffset
from gateway.store.log import Append, AppendRequest, TopicInfo
from tests.conftest import admin_url, eventually, kafka_bootstrap, native_url, running_gateway, test_config
from tests.kafka_clients import create_topics_retried
from tests.kafka_wire import build_request, call, decode, read_response, request
from tests.test_metrics import moved, samples, scrape, value

TIMEOUT = 30.0


@dataclass
class Pair:
    primary: EmbeddedRedis
    replica: EmbeddedRedis

    def replica_client(self) -> redis_sync.Redis:
        return redis_sync.Redis(port=self.replica.port)

    def primary_info(self) -> dict[str, Any]:
        with redis_sync.Redis(port=self.primary.port) as r:
            return r.info("replication")  # type: ignore[no-any-return]

    async def linked(self) -> None:
        """Until the replica has synced, written its AOF anew (it refuses SIGTERM meanwhile), and the
        primary counts it online."""
        def up() -> bool:
            with self.replica_client() as r:
                info = r.info()
            linked = info.get("master_link_status") == "up" and not info.get("aof_rewrite_in_progress") and not (
                info.get("aof_rewrite_scheduled"))
            slave = self.primary_info().get("slave0")
            return linked and isinstance(slave, dict) and slave.get("state") == "online"
        await eventually(up, TIMEOUT, "the replica's link up")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    primary = EmbeddedRedis(tmp_path / "primary")
    primary.start()
    with redis_sync.Redis(port=primary.port) as r:  # the replica's full sync starts at once, not after 5 s
        r.config_set("repl-diskless-sync-delay", 0)
    replica = EmbeddedRedis(tmp_path / "replica", replica_of=primary.port)
    try:
        replica.start()
        yield Pair(primary, replica)
    finally:
        if replica.proc is not None and replica.proc.poll() is None:
            os.kill(replica.proc.pid, signal.SIGCONT)  # stopped by a failed test: SIGTERM needs it running
        replica.stop()
        primary.stop()


@pytest.fixture
async def gateway(pair: Pair) -> AsyncIterator[Gateway]:
    await pair.linked()
    async with running_gateway(test_config(pair.primary.url)) as gw:
        yield gw


def _create(bs: str, topic: str, min_insync: int) -> None:
    """The topic created, again while refused retriably (a replica too slow for a quick gateway's
    wait on a loaded machine), as a user's script does."""
    create_topics_retried(bs, topic, config={"min.insync.replicas": str(min_insync)}, seconds=TIMEOUT)


def _produce(bs: str, values: list[bytes], topic: str = "t", on_delivery: Any = None,
             **conf: Any) -> list[tuple[ck.KafkaError | None, int]]:
    """Each value's delivery: its error (None: delivered) and offset."""
    out: list[tuple[ck.KafkaError | None, int]] = []

    def delivered(err: ck.KafkaError | None, msg: ck.Message) -> None:
        out.append((err, msg.offset()))
        if on_delivery is not None:
            on_delivery(err, msg)

    producer = ck.Producer({"bootstrap.servers": bs, "linger.ms": 0, **conf})
    for v in values:
        producer.produce(topic, v, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    return out


def _units(pair: Pair) -> int:
    """The MULTI units the primary ran: predicted appends (gateway/store/predicted.py), a kilobyte
    and more, or behind one; smaller ones alone go through append-5."""
    with redis_sync.Redis(port=pair.primary.port) as r:
        return int(r.info("commandstats").get("cmdstat_exec", {}).get("calls", 0))


def _high_watermark(pair: Pair, topic: str = "t") -> int:
    with redis_sync.Redis(port=pair.primary.port) as r:
        return int(r.hget(keys.meta(topic, 0), "hw"))  # type: ignore[arg-type]


async def test_acks_all_is_answered_once_the_replica_holds_the_records(pair, gateway):
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "t", 2)
    on_replica: list[int] = []
    replica = pair.replica_client()

    def seen(err: ck.KafkaError | None, msg: ck.Message) -> None:  # at the moment of acknowledgement
        on_replica.append(int(replica.hget(keys.meta("t", 0), "hw") or 0))  # type: ignore[arg-type]

    # the first through append-5, the kilobyte one and the one behind it predicted
    out = await asyncio.to_thread(_produce, bs, [b"a", b"b" * 1024, b"c"], on_delivery=seen, acks="all")
    replica.close()
    assert [err for err, _ in out] == [None] * 3
    assert _units(pair) >= 2
    assert all(hw > offset for (_, offset), hw in zip(out, on_replica, strict=True))


async def test_too_few_replicas_refuse_acks_all_before_writing(pair, gateway):
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "t", 2)
    pair.replica.stop()
    await eventually(lambda: pair.primary_info()["connected_slaves"] == 0, TIMEOUT, "the replica gone")
    # a short request timeout: a produce sent before the gateway reads the replica count again waits
    # out its WAIT, for the request's timeout, before the next is refused
    once = {"acks": "all", "enable.idempotence": False, "retries": 0, "request.timeout.ms": 2000}

    def refused() -> bool:  # the gateway reads the replica count again within a second
        [(err, _)] = _produce(bs, [b"x"], **once)
        return err is not None and err.code() == ck.KafkaError.NOT_ENOUGH_REPLICAS
    await eventually(lambda: asyncio.to_thread(refused), TIMEOUT, "NOT_ENOUGH_REPLICAS")
    before = _high_watermark(pair)
    [(err, _)] = await asyncio.to_thread(_produce, bs, [b"y"], **once)
    assert err is not None and err.code() == ck.KafkaError.NOT_ENOUGH_REPLICAS
    assert _high_watermark(pair) == before  # nothing written
    [(err, offset)] = await asyncio.to_thread(_produce, bs, [b"z"], acks=1)
    assert err is None and offset == before

    pair.replica.start()
    await pair.linked()
    [(err, offset)] = await asyncio.to_thread(_produce, bs, [b"w"], acks="all")  # retried until read again
    assert err is None and offset == before + 1


async def test_a_stalled_replica_fails_the_append_and_the_retry_stores_it_once(pair, gateway):
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "t", 2)
    assert pair.replica.proc is not None
    before = await scrape(gateway)  # the counts are the process's
    os.kill(pair.replica.proc.pid, signal.SIGSTOP)
    values = [f"v{i}".encode() * (1 + 512 * (i % 2)) for i in range(5)]  # through append-5 and predicted
    producing = asyncio.create_task(asyncio.to_thread(
        _produce, bs, values, acks="all", **{"enable.idempotence": True, "request.timeout.ms": 1000}))

    async def failed_after_append() -> bool:  # Kafka's DelayedProduce expiring
        return moved(samples(before), samples(await scrape(gateway)), "gateway_request_errors_total",
                     face="kafka", api="Produce", code="REQUEST_TIMED_OUT") > 0
    await eventually(failed_after_append, TIMEOUT, "REQUEST_TIMED_OUT answered")
    assert not producing.done()  # the client retries
    os.kill(pair.replica.proc.pid, signal.SIGCONT)
    out = await producing
    assert [err for err, _ in out] == [None] * 5
    assert sorted(offset for _, offset in out) == list(range(5))
    with pair.replica_client() as r:
        stored = r.xrange(keys.log("t", 0))
    assert sum(int(f[b"n"]) for _, f in stored) == 5 == _high_watermark(pair)
    assert _units(pair) > 0


@pytest.mark.parametrize("size", [1, 1024])  # through append-5, predicted
async def test_a_wait_lost_after_the_append_closes_the_connection(pair, gateway, caplog, size):
    """The connection waiting for the replica is lost after the batch was appended: where the batch
    will be is unknown, so the client's connection closes, as from a leader gone mid-request, and
    the producer resends in order under the same sequences. Never KAFKA_STORAGE_ERROR, which
    librdkafka takes as not persisted (tests/jepsen primary-isolated, seed 404: such a batch was
    written again under a bumped epoch), nor an answer its next pipelined batch could overtake on
    the next primary (soak sentinel:729702984)."""
    caplog.set_level(logging.INFO, "gateway.kafka.produce")
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "t", 2)
    assert pair.replica.proc is not None
    before = await scrape(gateway)
    os.kill(pair.replica.proc.pid, signal.SIGSTOP)
    producing = asyncio.create_task(asyncio.to_thread(
        _produce, bs, [b"v" * size], acks="all", **{"enable.idempotence": True, "request.timeout.ms": 20000}))
    await eventually(lambda: _high_watermark(pair) == 1, TIMEOUT, "the batch appended")

    def waiting() -> list[str]:  # a predicted append's first unit, refused, is resent behind a WAIT
        with redis_sync.Redis(port=pair.primary.port) as r:
            return [c["id"] for c in r.client_list() if c["name"] == "gateway-append-replicated" and c["cmd"] == "wait"]
    await eventually(waiting, TIMEOUT, "its WAIT pending")
    with redis_sync.Redis(port=pair.primary.port) as r:
        for cid in waiting():
            r.client_kill_filter(_id=cid)

    await eventually(lambda: "Redis failed under its produce; closing" in caplog.text, TIMEOUT,
                     "the client's connection closed")
    for code in ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", "KAFKA_STORAGE_ERROR"):
        assert not moved(samples(before), samples(await scrape(gateway)), "gateway_request_errors_total",
                         face="kafka", api="Produce", code=code)
    os.kill(pair.replica.proc.pid, signal.SIGCONT)
    assert await producing == [(None, 0)]  # the retry finds it stored: once, at its offset
    assert _high_watermark(pair) == 1
    assert (_units(pair) > 0) == (size >= 1024)


async def test_a_predicted_append_resent_after_a_refusal_is_on_the_replica_when_answered(pair):
    """Another writer appends between, so each kilobyte acks=all append's prediction is refused and
    resent (gateway/store/predicted.py): the resend's own WAIT, not the refused round's, answers it."""
    await pair.linked()
    store, other = Store.open(pair.primary.url), Store.open(pair.primary.url)
    replica = pair.replica_client()
    try:
        await store.log.create_topic(TopicInfo("t", 1))
        with redis_sync.Redis(port=pair.primary.port) as r:
            r.config_resetstat()
        for k in range(3):
            await other.log.append([AppendRequest("t", 0, build_batch([(None, b"o", [])]), 1, 0)])
            [answer] = await store.log.append(
                [AppendRequest("t", 0, build_batch([(None, b"v" * 1024, [])]), 1, 0, replicas=1)], sent=lambda: None)
            assert isinstance(answer, Append) and answer.base_offset == 2 * k + 1
            assert int(replica.hget(keys.meta("t", 0), "hw") or 0) > answer.base_offset  # type: ignore[arg-type]
        with redis_sync.Redis(port=pair.primary.port) as r:
            renames = r.info("commandstats")["cmdstat_rename"]
        assert renames["failed_calls"] >= 3 and renames["calls"] > renames["failed_calls"]  # refused, resent
        assert pair.replica.proc is not None
        await other.log.append([AppendRequest("t", 0, build_batch([(None, b"o", [])]), 1, 0)])
        os.kill(pair.replica.proc.pid, signal.SIGSTOP)  # the resend stored, never confirmed
        [answer] = await store.log.append([AppendRequest("t", 0, build_batch([(None, b"v" * 1024, [])]), 1, 0,
                                                         replicas=1)], sent=lambda: None, timeout_ms=300)
        assert isinstance(answer, ReplicationTimedOut) and answer.base_offset == 7
    finally:
        if pair.replica.proc is not None:
            os.kill(pair.replica.proc.pid, signal.SIGCONT)
        replica.close()
        await store.close()
        await other.close()


# -- state changes a client is told are done wait for the replica too ---------------------------------

@pytest.fixture
async def quick_gateway(pair: Pair) -> AsyncIterator[Gateway]:
    """State changes give up on a stalled replica after a fraction of a second, not Kafka's 5 s."""
    await pair.linked()
    async with running_gateway(test_config(pair.primary.url, state_replication_timeout_ms=300)) as gw:
        yield gw


def _committed_on_replica(pair: Pair, group: str, topic: str = "t") -> int | None:
    with pair.replica_client() as r:
        raw = r.hget(keys.group_offsets(group), f"{topic}:0")
    return None if raw is None else CommittedOffset.unpack(raw).offset


def _commit(bs: str, offset: int, group: str = "g") -> None:
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[ck.TopicPartition("t", 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def _transact_and_commit(bs: str, pair: Pair) -> dict[str, Any]:
    """A transaction that produces and commits offsets, then a plain consumer's commit; what the
    replica holds the moment each is answered."""
    seen: dict[str, Any] = {}
    with pair.replica_client() as replica:
        producer = ck.Producer({"bootstrap.servers": bs, "transactional.id": "tx", "linger.ms": 0})
        producer.init_transactions(TIMEOUT)
        seen["epoch"] = replica.hget(keys.txn_key(full_key("", "tx")), "epoch")
        producer.begin_transaction()
        producer.produce("t", b"a")
        consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": "g", "enable.auto.commit": False})
        producer.send_offsets_to_transaction([ck.TopicPartition("t", 0, 7)], consumer.consumer_group_metadata(),
                                             TIMEOUT)
        producer.commit_transaction(TIMEOUT)
        seen["txn offsets"] = _committed_on_replica(pair, "g")
        seen["replica hw"] = int(replica.hget(keys.meta("t", 0), "hw") or 0)
        consumer.close()
        _commit(bs, 9)
        seen["offsets"] = _committed_on_replica(pair, "g")
        member = ck.Consumer({"bootstrap.servers": bs, "group.id": "g848", "group.protocol": "consumer",
                              "auto.offset.reset": "earliest", "enable.auto.commit": False})
        member.subscribe(["t"])
        while (msg := member.poll(0.1)) is None or msg.error() is not None:
            pass
        member.commit(msg, asynchronous=False)  # KIP-848's OffsetCommit, with the member's epoch
        seen["member offsets"] = _committed_on_replica(pair, "g848")
        member.close()
    return seen


async def test_state_changes_are_on_the_replica_when_answered(pair: Pair, gateway: Gateway) -> None:
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "t", 1)
    seen = await asyncio.to_thread(_transact_and_commit, bs, pair)
    assert seen["epoch"] is not None  # InitProducerId: the fencing epoch
    assert seen["txn offsets"] == 7  # TxnOffsetCommit applied at EndTxn
    assert seen["replica hw"] == 2  # the record and its commit marker
    assert seen["offsets"] == 9  # OffsetCommit
    assert seen["member offsets"] == 1  # a KIP-848 member's OffsetCommit: past the record it read


async def test_a_stalled_replica_fails_state_changes_retriably_until_it_returns(
        pair: Pair, quick_gateway: Gateway) -> None:
    gw = quick_gateway
    bs = kafka_bootstrap(gw)
    await asyncio.to_thread(_create, bs, "t", 1)
    producer = ck.Producer({"bootstrap.servers": bs, "transactional.id": "tx", "linger.ms": 0})

    def begin() -> None:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.produce("t", b"a")
        assert producer.flush(TIMEOUT) == 0
    await asyncio.to_thread(begin)
    assert pair.replica.proc is not None
    before = await scrape(gw)
    os.kill(pair.replica.proc.pid, signal.SIGSTOP)

    committing = asyncio.create_task(asyncio.to_thread(_commit, bs, 5))
    ending = asyncio.create_task(asyncio.to_thread(producer.commit_transaction, TIMEOUT))

    async def refused() -> bool:
        got = samples(await scrape(gw))
        return all(moved(samples(before), got, "gateway_request_errors_total", face="kafka", api=api,
                         code="COORDINATOR_NOT_AVAILABLE") > 0 for api in ("OffsetCommit", "EndTxn"))
    await eventually(refused, TIMEOUT, "COORDINATOR_NOT_AVAILABLE answered")
    assert not committing.done() and not ending.done()  # the clients retry
    os.kill(pair.replica.proc.pid, signal.SIGCONT)
    await committing
    await ending
    assert _committed_on_replica(pair, "g") == 5
    with pair.replica_client() as r:
        assert int(r.hget(keys.meta("t", 0), "hw")) == 2  # the record, its marker


async def test_native_acks_all_and_subscription_acks_wait_for_the_replica(pair: Pair, gateway: Gateway) -> None:
    await asyncio.to_thread(_create, kafka_bootstrap(gateway), "t", 2)
    async with await Client.connect(native_url(gateway)) as client:
        consumer = await client.subscribe("t", "s")
        producer = await client.create_producer("t", acks="all", send_timeout=1.5)
        ids = [await producer.send(v) for v in (b"a", b"b")]
        with pair.replica_client() as r:
            assert int(r.hget(keys.meta("t", 0), "hw")) == 2
        assert [m.offset for m in ids] == [0, 1]
        for _ in ids:  # a subscription's acks are state changes: on the replica when acknowledged
            await consumer.acknowledge(await consumer.receive(timeout=TIMEOUT))
        with pair.replica_client() as r:
            assert int(r.hget(keys.subscription("t", 0, "s"), "cursor")) == 2
        pair.replica.stop()
        with pytest.raises(NotEnoughReplicas):  # retried for its send timeout; the last try refused
            await producer.send(b"c")


async def test_native_creation_refused_while_the_replica_is_away_is_retried_until_it_returns(
        pair: Pair, gateway: Gateway) -> None:
    """The client tries a producer's creation again while the gateway refuses it retriably
    (NotEnoughReplicas: the topic it auto-creates is a state change, which waits for the replica that
    is away), as Pulsar's client does within its operation timeout, and succeeds once the replica is
    back; so does a subscription's."""
    async with await Client.connect(native_url(gateway), operation_timeout=TIMEOUT) as client:
        before = samples(await scrape(gateway))
        pair.replica.stop()
        creating = asyncio.create_task(client.create_producer("auto", acks="all"))

        async def refused() -> bool:
            return moved(before, samples(await scrape(gateway)), "gateway_request_errors_total", face="native",
                         api="create_producer", code="NOT_ENOUGH_REPLICAS") > 0
        await eventually(refused, TIMEOUT, "the creation refused NOT_ENOUGH_REPLICAS")
        assert not creating.done()  # the client tries again
        # the topic whose partitions cannot be made now is not listed, and listing still answers
        assert 'topic="auto"' not in await scrape(gateway)
        pair.replica.start()
        producer = await creating
        consumer = await client.subscribe("auto", "s", initial_position="earliest")
        assert (await producer.send(b"a")).offset == 0
        assert (await consumer.receive(timeout=TIMEOUT)).value == b"a"


async def test_replicas_are_shown_and_a_min_insync_they_cannot_meet_is_logged_at_start_up(
        pair: Pair, gateway: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    await asyncio.to_thread(_create, kafka_bootstrap(gateway), "t", 2)
    async with aiohttp.ClientSession() as http, http.get(admin_url(gateway) + "/admin/v2/replication") as r:
        [primary] = await r.json()
    assert primary["primary"] == f"127.0.0.1:{pair.primary.port}" and primary["replicas_online"] == 1
    assert [(rep["state"], rep["address"]) for rep in primary["replicas"]] == [
        ("online", f"127.0.0.1:{pair.replica.port}")]
    got = samples(await scrape(gateway))
    assert value(got, "gateway_redis_replicas", primary=primary["primary"]) == 1
    assert any(name == "gateway_redis_replica_lag_bytes" for name, _ in got)

    pair.replica.stop()
    await eventually(lambda: pair.primary_info()["connected_slaves"] == 0, TIMEOUT, "the replica gone")
    async with running_gateway(test_config(pair.primary.url)):
        pass
    assert "topic t: min.insync.replicas 2 needs 1 Redis replicas" in caplog.text


async def test_on_a_cluster_state_changes_and_reads_wait_for_the_replica_of_their_slots_primary(tmp_path: Path) -> None:
    """State changes wait for the replica as behind Sentinel, and so do reads (read-mark-1.lua: a
    PUBLISH is not in a Cluster's replication stream). Found by the soak (cluster:938408598): a
    record polled from an isolated primary, which its failover then dropped."""
    cluster = EmbeddedCluster(tmp_path / "cluster")
    replica = EmbeddedRedis(tmp_path / "replica", cluster=True)
    cluster.start()
    try:
        replica.start()
        with redis_sync.Redis(port=cluster.nodes[0].port) as r:
            slot = int(r.execute_command("CLUSTER", "KEYSLOT", keys.group_offsets("g")))
            owner = next(int(s[2][1]) for s in r.execute_command("CLUSTER", "SLOTS") if s[0] <= slot <= s[1])
        with redis_sync.Redis(port=owner) as r:
            r.config_set("repl-diskless-sync-delay", 0)
            owner_id = r.execute_command("CLUSTER", "MYID").decode()
            bus = next(line.split()[1].split("@")[1].split(",")[0]
                       for line in r.execute_command("CLUSTER", "NODES").decode().splitlines() if "myself" in line)
        with redis_sync.Redis(port=replica.port) as r:
            r.execute_command("CLUSTER", "MEET", "127.0.0.1", owner, bus)
            await eventually(lambda: owner_id in r.execute_command("CLUSTER", "NODES").decode(), TIMEOUT, "the meet")
            r.execute_command("CLUSTER", "REPLICATE", owner_id)

        def online() -> bool:
            with redis_sync.Redis(port=owner) as r:
                slave = r.info("replication").get("slave0")
            with redis_sync.Redis(port=replica.port) as r:  # serving reads: it knows every slot's owner
                serving = r.cluster("info").get("cluster_state") == "ok"  # type: ignore[no-untyped-call]
            return isinstance(slave, dict) and slave.get("state") == "online" and serving
        await eventually(online, TIMEOUT, "the replica online")

        def on_replica() -> int | None:
            with redis_sync.Redis(port=replica.port) as r:
                r.execute_command("READONLY")
                raw = r.hget(keys.group_offsets("g"), "t:0")
            return None if raw is None else CommittedOffset.unpack(raw).offset

        async with running_gateway(test_config(cluster.url, state_replication_timeout_ms=300)) as gw:
            bs = kafka_bootstrap(gw)
            await asyncio.to_thread(_create, bs, "t", 1)
            await asyncio.to_thread(_commit, bs, 5)
            assert on_replica() == 5
            before = await scrape(gw)
            assert replica.proc is not None
            os.kill(replica.proc.pid, signal.SIGSTOP)
            try:
                committing = asyncio.create_task(asyncio.to_thread(_commit, bs, 6))

                async def refused() -> bool:
                    return moved(samples(before), samples(await scrape(gw)), "gateway_request_errors_total",
                                 face="kafka", api="OffsetCommit", code="COORDINATOR_NOT_AVAILABLE") > 0
                await eventually(refused, TIMEOUT, "COORDINATOR_NOT_AVAILABLE answered")
            finally:
                os.kill(replica.proc.pid, signal.SIGCONT)
            await committing
            assert on_replica() == 6
            with redis_sync.Redis(port=owner) as r:  # a topic whose partition is on the replicated primary
                topic = next(t for t in (f"r{i}" for i in range(10_000))
                             if int(r.execute_command("CLUSTER", "KEYSLOT", keys.log(t, 0))) in owned(r))
            await asyncio.to_thread(_create, bs, topic, 1)
            await asyncio.to_thread(_produce, bs, [b"a"], topic, acks="1")
            assert gw.services is not None
            assert [e.base_offset for e in (await gw.services.log.read(topic, 0, 0)).entries] == [0]
            os.kill(replica.proc.pid, signal.SIGSTOP)
            try:
                await asyncio.to_thread(_produce, bs, [b"b"], topic, acks="1")  # on the primary alone
                with pytest.raises(StorageUnavailable):
                    await gw.services.log.read(topic, 0, 0)
            finally:
                os.kill(replica.proc.pid, signal.SIGCONT)
            assert [e.base_offset for e in (await gw.services.log.read(topic, 0, 0)).entries] == [0, 1]
            before = _waits(owner)
            reads = await asyncio.gather(*(gw.services.log.read(topic, 0, 0) for _ in range(20)))
            assert all(len(sl.entries) == 2 for sl in reads)
            assert _waits(owner) - before < 20  # reads sent while a WAIT is in flight share the next one
    finally:
        replica.stop()
        cluster.stop()


def _waits(port: int) -> int:
    with redis_sync.Redis(port=port) as r:
        return int(r.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def owned(r: redis_sync.Redis) -> set[int]:
    """The slots the node `r` talks to serves."""
    me = r.execute_command("CLUSTER", "MYID").decode()
    return {slot for s in r.execute_command("CLUSTER", "SLOTS") if s[2][2].decode() == me
            for slot in range(s[0], s[1] + 1)}


async def test_concurrent_state_changes_share_their_waits(pair: Pair) -> None:
    await pair.linked()

    def waits() -> int:
        return _waits(pair.primary.port)
    store = Store.open(pair.primary.url)
    try:
        before = waits()
        codes = await asyncio.gather(*(store.groups.commit(f"g{i}", -1, "", None, {("t", 0): CommittedOffset(i)})
                                       for i in range(20)))
        assert codes == [0] * 20
        assert [_committed_on_replica(pair, f"g{i}") for i in range(20)] == list(range(20))
        assert waits() - before < 20  # commits sent while a WAIT is in flight share the next one
    finally:
        await store.close()


@pytest.mark.parametrize("direct", [False, True], ids=["redis-py", "direct"])
async def test_concurrent_reads_share_their_waits_and_each_is_confirmed(pair: Pair, direct: bool) -> None:
    """The reads of a 16-partition fetch share a read mark and a WAIT (issue 35): one WAIT each
    queued every read of the direct connection behind the replica's answer to the one before."""
    await pair.linked()
    store = Store.open(pair.primary.url)
    logs = LogService(store, auto_create=False)
    try:
        await logs.create_topic("t", 16)
        await logs.append([("t", p, build_batch([(None, str(p).encode(), [])])) for p in range(16)])
        before = _waits(pair.primary.port)
        slices = await asyncio.gather(*(store.log.read("t", p, 0, 8, direct=direct) for p in range(16)))
        assert [[e.base_offset for e in sl.entries] for sl in slices] == [[0]] * 16
        assert _waits(pair.primary.port) - before < 16
        assert pair.replica.proc is not None
        await logs.append([("t", 0, build_batch([(None, b"only on the primary", [])]))])
        os.kill(pair.replica.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(StorageUnavailable):  # what no replica holds is not read, retriably
                await store.log.read("t", 0, 0, 8, direct=direct)
        finally:
            os.kill(pair.replica.proc.pid, signal.SIGCONT)
    finally:
        await store.close()


async def test_a_record_no_replica_holds_is_not_read_until_one_does(pair: Pair, gateway: Gateway) -> None:
    """Kafka hands a consumer nothing above the high watermark, which moves once the replicas hold
    the records: a read waits for the replica (Redis's WAIT after a PUBLISH on the reading connection)
    and is refused, retriably, when it cannot confirm what it read. Found by tests/jepsen's primary-paused schedule: a
    primary resumed after its failover served appends it alone held, at offsets the new primary had
    given to other records."""
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "t", 1)
    await asyncio.to_thread(_produce, bs, [b"a"], acks="1")
    await eventually(lambda: _replica_high_watermark(pair) == 1, TIMEOUT, "the first record on the replica")
    assert pair.replica.proc is not None and gateway.services is not None
    os.kill(pair.replica.proc.pid, signal.SIGSTOP)
    try:
        await asyncio.to_thread(_produce, bs, [b"b"], acks="1")  # acks=1: on the primary alone
        with pytest.raises(StorageUnavailable):  # retriable: Kafka's consumers fetch again
            await gateway.services.log.read("t", 0, 0)
    finally:
        os.kill(pair.replica.proc.pid, signal.SIGCONT)
    confirmed = await gateway.services.log.read("t", 0, 0)
    assert [e.base_offset for e in confirmed.entries] == [0, 1] and confirmed.high_watermark == 2


def _replica_high_watermark(pair: Pair, topic: str = "t") -> int:
    with pair.replica_client() as r:
        return int(r.hget(keys.meta(topic, 0), "hw") or 0)  # type: ignore[arg-type]


async def test_api_versions_is_answered_while_redis_is_stopped(pair: Pair, gateway: Gateway,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection's first request, whatever Redis does: librdkafka takes an ApiVersions that fails or
    outlasts its api.version.request.timeout.ms for a broker without ApiVersions, and its
    send_offsets_to_transaction then waits for ever for a group coordinator speaking the transaction
    APIs (tests/jepsen's primary-paused: a reconnect during the pause). The finalized features are
    the ones last read (each answer reads them again here, so the wait on Redis is what is tested)."""
    monkeypatch.setattr(features, "ADVERTISE_FRESH", 0.0)
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)
    values = {"client_software_name": "raw", "client_software_version": "1"}
    try:
        before = await call((reader, writer), ApiKey.API_VERSIONS, 3, values)
        assert pair.primary.proc is not None
        os.kill(pair.primary.proc.pid, signal.SIGSTOP)
        try:
            during = await call((reader, writer), ApiKey.API_VERSIONS, 3, values)
        finally:
            os.kill(pair.primary.proc.pid, signal.SIGCONT)
    finally:
        writer.close()
    assert during.error_code == 0 and during.api_keys == before.api_keys
    assert (during.finalized_features_epoch, during.finalized_features) == (
        before.finalized_features_epoch, before.finalized_features)


# -- every produce is answered within its own timeout, whatever Redis does meanwhile -------------------

ANSWER_MARGIN = 1.0  # seconds past a produce's timeout_ms that its client still waits for the answer


async def test_pipelined_acks_all_produces_are_each_answered_within_their_own_timeout(pair, gateway):
    """Kafka's leader expires each produce's DelayedProduce on its own `timeout_ms` and answers
    REQUEST_TIMED_OUT with the offsets the append took. A produce that arrived while the WAIT of the
    one before it held the connection waited a second WAIT of its own timeout on top: twice its
    timeout, when its client had given up (tests/jepsen soak sentinel:461914276)."""
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "t", 2)
    assert pair.replica.proc is not None
    timeout_ms = 3000
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)
    os.kill(pair.replica.proc.pid, signal.SIGSTOP)
    try:
        for cid, value in enumerate((b"a", b"b")):
            writer.write(request(build_request(ApiKey.PRODUCE, 9, {
                "transactional_id": None, "acks": -1, "timeout": timeout_ms,
                "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": build_batch([(None, value, [])])}]}],
            }), cid))
        sent = asyncio.get_running_loop().time()
        answers = []
        for _ in range(2):
            async with asyncio.timeout_at(sent + timeout_ms / 1000 + ANSWER_MARGIN):  # the client's patience
                cid, resp = decode(ApiKey.PRODUCE, 9, await read_response(reader))
            [p] = resp.responses[0].partition_responses
            answers.append((cid, p.error_code, p.base_offset))
    finally:
        os.kill(pair.replica.proc.pid, signal.SIGCONT)
        writer.close()
    assert answers == [(0, KafkaError.request_timed_out, 0), (1, KafkaError.request_timed_out, 1)]


async def test_a_produce_to_a_stopped_primary_is_answered_in_time_and_its_retries_store_it_once(
        pair, gateway, caplog):
    """Redis stopped, not replaced: the append sent waits for a reply that only its resumption brings.
    The gateway gives up within the produce's timeout and closes the connection, as after a reply
    lost (maybe stored), so the idempotent producer resends under the same sequence on a new one,
    rather than timing the request out itself and, its records' time run out, bumping its epoch and
    writing them again as new (tests/jepsen soak sentinel:461914276). Every retry reaches the stopped
    Redis too; it runs them all once resumed, and the batch is stored once."""
    bs = kafka_bootstrap(gateway)
    await asyncio.to_thread(_create, bs, "t", 1)
    assert pair.primary.proc is not None
    caplog.set_level(logging.INFO, "gateway.kafka.produce")
    producer = ck.Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 0,
                            "request.timeout.ms": 2000, "message.timeout.ms": int(TIMEOUT * 4000)})
    out: list[tuple[ck.KafkaError | None, int]] = []
    producer.produce("t", b"a", on_delivery=lambda err, msg: out.append((err, msg.offset())))
    assert await asyncio.to_thread(producer.flush, TIMEOUT) == 0
    os.kill(pair.primary.proc.pid, signal.SIGSTOP)
    try:
        producer.produce("t", b"b", on_delivery=lambda err, msg: out.append((err, msg.offset())))
        producer.poll(0)
        await eventually(lambda: "Redis failed under its produce; closing" in caplog.text, TIMEOUT,
                         "the produce given up on and its connection closed")
    finally:
        os.kill(pair.primary.proc.pid, signal.SIGCONT)
    assert await asyncio.to_thread(producer.flush, TIMEOUT * 2) == 0
    assert out == [(None, 0), (None, 1)]
    assert _high_watermark(pair) == 2


async def test_a_produce_whose_topic_read_a_stopped_redis_leaves_unanswered_closes_in_time(pair, gateway):
    """Produce v13 names its topics by id, each looked up afresh before anything is written: with
    Redis stopped that read waits for its resumption. It is cancelled within the produce's timeout
    and the connection closed, as when Redis is found away; nothing was sent, so nothing is written
    when Redis resumes."""
    await asyncio.to_thread(_create, kafka_bootstrap(gateway), "t", 1)
    info = await gateway.services.log.topic("t", create=False)
    assert info is not None and pair.primary.proc is not None
    timeout_ms = 2000
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.listeners["kafka"].port)
    os.kill(pair.primary.proc.pid, signal.SIGSTOP)
    try:
        writer.write(request(build_request(ApiKey.PRODUCE, 13, {
            "transactional_id": None, "acks": 1, "timeout": timeout_ms,
            "topic_data": [{"topic_id": uuid.UUID(info.topic_id),
                            "partition_data": [{"index": 0, "records": build_batch([(None, b"a", [])])}]}],
        }), 0))
        async with asyncio.timeout(timeout_ms / 1000 + ANSWER_MARGIN):  # the client's patience
            closed = await reader.read()
    finally:
        os.kill(pair.primary.proc.pid, signal.SIGCONT)
        writer.close()
    assert closed == b""
    assert _high_watermark(pair) == 0
