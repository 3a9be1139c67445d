"""acks=all waits for every replica in the primary's in-sync set, as Kafka's waits for its whole ISR,
not for `min.insync.replicas` - 1 of them: with two replicas and min.insync.replicas 2, a record
one replica confirmed was acknowledged, and the Sentinels could then promote the other, which
lacked it (soak sentinel:70115030). A replica unheard past `--replica-lag-max-ms` leaves the set
and stops being waited for, as a follower leaves Kafka's ISR."""

from __future__ import annotations

import asyncio
import os
import signal
import struct
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import confluent_kafka as ck
import pytest
import redis as redis_sync
from kio.schema.errors import ErrorCode as KafkaError

from gateway.formats.records import BatchBuilder, build_batch, parse_header
from gateway.kafka.dispatch import ApiKey
from gateway.store import keys
from gateway.store.embedded import EmbeddedCluster, EmbeddedRedis
from gateway.store.replication import PrimaryStatus, ReplicaStatus, primary_status
from tests.conftest import eventually, kafka_bootstrap, running_gateway, test_config
from tests.kafka_wire import build_request, call, decode, idempotent_batch, request
from tests.test_acks_all import Pair, _create, _produce, pair  # noqa: F401 (pair: the fixture)
from tests.test_failover import (  # noqa: F401 (group: the fixture)
    TIMEOUT,
    _info,
    _online_replicas,
    _quiet,
    _replica_synced,
    _slot_owner,
    group,
)


def test_the_in_sync_set_is_the_replicas_online_and_heard_from_within_the_lag_max():
    info = {"master_repl_offset": 90,
            "slave0": {"ip": "a", "port": 1, "state": "online", "offset": 90, "lag": 0},
            "slave1": {"ip": "b", "port": 2, "state": "online", "offset": 80, "lag": 10},
            "slave2": {"ip": "c", "port": 3, "state": "online", "offset": 70, "lag": 11},
            "slave3": {"ip": "d", "port": 4, "state": "wait_bgsave", "offset": 0, "lag": 0}}
    status = primary_status("p:0", info)
    assert status.online == 3
    # Redis's lag is whole seconds, compared as its own min-replicas-max-lag is: at most the max
    assert [status.in_sync(ms) for ms in (1_000, 10_000, 11_000, 30_000)] == [1, 2, 3, 3]


def test_a_replica_acknowledging_without_catching_up_leaves_the_set_too():
    """As Kafka's follower that fetches but never reaches the leader's end (lastCaughtUpTimeMs)."""
    def status(primary: int, a: int, b: int) -> PrimaryStatus:
        return PrimaryStatus("p:0", primary, [ReplicaStatus("a", "online", a, primary - a, 0),
                                              ReplicaStatus("b", "online", b, primary - b, 0)])
    first = status(100, 100, 100)
    seen = first.caught_up(None, now=0.0)
    assert seen == {"a": 0.0, "b": 0.0}
    later = status(300, 300, 100)  # b acknowledges, stuck at 100
    seen = later.caught_up((first.offset, seen), now=5.0)
    assert seen == {"a": 5.0, "b": 5.0}  # b held all the primary had at the read before
    last = status(500, 480, 100)
    seen = last.caught_up((later.offset, seen), now=12.0)
    assert seen == {"a": 12.0, "b": 5.0}
    assert [last.in_sync(ms, seen, now=12.0) for ms in (6_000, 7_000)] == [1, 2]


async def _produce_once(port: int, value: bytes, timeout_ms: int) -> tuple[int, int]:
    """One acks=all Produce of `value` to t-0 on a connection of its own: (error code, base offset)."""
    conn = await asyncio.open_connection("127.0.0.1", port)
    try:
        answer = await call(conn, ApiKey.PRODUCE, 9, {
            "transactional_id": None, "acks": -1, "timeout": timeout_ms,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": build_batch([(None, value, [])])}]}],
        })
    finally:
        conn[1].close()
    [p] = answer.responses[0].partition_responses
    return p.error_code, p.base_offset

T = TypeVar("T")


def _stopped(node: EmbeddedRedis) -> int:
    assert node.proc is not None
    os.kill(node.proc.pid, signal.SIGSTOP)
    return node.proc.pid


@pytest.mark.slow
async def test_acks_all_waits_for_every_replica_in_sync_so_a_failover_to_any_keeps_it(group, tmp_path):  # noqa: F811
    """One of two replicas paused, still in the set (Kafka's 30 s lag max): the produce is not
    acknowledged from the other one alone, and its request times out as Kafka's DelayedProduce does
    (REQUEST_TIMED_OUT); once resumed, it holds what is acknowledged. Then the replica that was
    never paused and the primary die, the Sentinels promote the resumed one, and the record is there."""
    primary, late = group.primary_port(), group.replica_port()
    quick = group._node(tmp_path / "quick", primary)
    await eventually(lambda: _replica_synced(quick.port) and _online_replicas(primary) == 2, TIMEOUT, "two replicas")
    async with running_gateway(test_config(group.url, replica_lag_max_ms=30_000)) as gw:
        bs = kafka_bootstrap(gw)
        await asyncio.to_thread(_create, bs, "t", 2)
        port = gw.listeners["kafka"].port
        pid = _stopped(group.nodes[late])
        try:
            assert await _produce_once(port, b"unconfirmed", 1000) == (KafkaError.request_timed_out, 0)
        finally:
            os.kill(pid, signal.SIGCONT)
        [(err, offset)] = await asyncio.to_thread(_produce, bs, [b"kept"], acks="all")
        assert err is None and offset == 1
    assert quick.proc is not None
    quick.proc.kill()
    quick.stop()
    await eventually(lambda: _online_replicas(primary) == 1, TIMEOUT, "the quick replica gone")
    group.kill_primary()
    assert await group.promoted(primary) == late
    with redis_sync.Redis(port=late) as r:
        assert int(r.hget(keys.meta("t", 0), "hw") or 0) == 2  # type: ignore[arg-type]
        assert [f[b"n"] for _, f in r.xrange(keys.log("t", 0))] == [b"1", b"1"]


@pytest.fixture
def trio(tmp_path: Path) -> Iterator[tuple[EmbeddedRedis, EmbeddedRedis, EmbeddedRedis]]:
    """A primary and two replicas, no Sentinels."""
    nodes: list[EmbeddedRedis] = []
    try:
        primary = EmbeddedRedis(tmp_path / "primary")
        primary.start()
        nodes.append(primary)
        with redis_sync.Redis(port=primary.port) as r:  # a replica's full sync starts at once, not after 5 s
            r.config_set("repl-diskless-sync-delay", 0)
        for name in ("a", "b"):
            replica = EmbeddedRedis(tmp_path / name, replica_of=primary.port)
            replica.start()
            nodes.append(replica)
        yield nodes[0], nodes[1], nodes[2]
    finally:
        for node in reversed(nodes):
            if node.proc is not None and node.proc.poll() is None:
                os.kill(node.proc.pid, signal.SIGCONT)  # stopped by a failed test: SIGTERM needs it running
            node.stop()


async def test_a_replica_unheard_past_the_lag_max_leaves_the_set_and_is_not_waited_for(trio):
    primary, kept, paused = trio
    await eventually(lambda: all(_replica_synced(n.port) for n in (kept, paused)) and _online_replicas(primary.port) == 2,
                     TIMEOUT, "two replicas")
    async with running_gateway(test_config(primary.url, replica_lag_max_ms=2000)) as gw:
        await asyncio.to_thread(_create, kafka_bootstrap(gw), "t", 2)
        pid = _stopped(paused)
        try:
            # waited for while it is in the set, then acknowledged once it has left it, still paused
            assert await _produce_once(gw.listeners["kafka"].port, b"v", 30_000) == (KafkaError.none, 0)
            [seen] = [r for r in primary_status("", _info(primary.port)).replicas if r.address.endswith(f":{paused.port}")]
            assert seen.state == "online"  # still its primary's replica: out of the set, not dropped
        finally:
            os.kill(pid, signal.SIGCONT)


def _answered(bs: str, code: int) -> Callable[[], Awaitable[bool]]:
    """Whether a plain acks=all producer's one record is answered `code` (0: stored): awaited until
    the gateway has read its primary's replicas again."""
    once = {"acks": "all", "enable.idempotence": False, "retries": 0, "request.timeout.ms": 2000}

    def check() -> bool:
        [(err, _)] = _produce(bs, [b"probe"], **once)
        return (err.code() if err is not None else 0) == code
    return lambda: asyncio.to_thread(check)


async def _produce_seq(port: int, seq: int, value: bytes = b"v", timeout_ms: int = 1000) -> bytes | int:
    """An acks=all produce of one idempotent batch at `seq`: its error code, or b"" when the gateway
    closed the connection instead of answering."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request(build_request(ApiKey.PRODUCE, 9, {
            "transactional_id": None, "acks": -1, "timeout": timeout_ms,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": idempotent_batch(value, seq)}]}],
        }), 0))
        head = await reader.read(4)
        if not head:
            return b""
        _, resp = decode(ApiKey.PRODUCE, 9, await reader.readexactly(struct.unpack(">i", head)[0]))
        return int(resp.responses[0].partition_responses[0].error_code)
    finally:
        writer.close()


@pytest.mark.parametrize("value", [b"v", b"v" * 1024])  # through append-5, predicted (gateway/store/predicted.py)
async def test_a_refusal_by_a_primary_its_replicas_do_not_confirm_is_retried_not_answered(trio, value):
    """A primary cut off while the Sentinels promote another refuses from its own, older producer
    state; librdkafka takes OUT_OF_ORDER_SEQUENCE_NUMBER as fatal. So an acks=all append's refusal
    stands only once the in-sync replicas confirm the primary, as any append's answer does."""
    primary, _, paused = trio
    await eventually(lambda: all(_replica_synced(n.port) for n in trio[1:]) and _online_replicas(primary.port) == 2,
                     TIMEOUT, "two replicas")
    async with running_gateway(test_config(primary.url, replica_lag_max_ms=30_000)) as gw:
        await asyncio.to_thread(_create, kafka_bootstrap(gw), "t", 2)
        port = gw.listeners["kafka"].port
        assert await _produce_seq(port, 0, value) == KafkaError.none
        pid = _stopped(paused)
        try:
            assert await _produce_seq(port, 5, value) == b""  # closed: the client sends it again
        finally:
            os.kill(pid, signal.SIGCONT)
        assert await _produce_seq(port, 5, value) == KafkaError.out_of_order_sequence_number


@pytest.mark.parametrize("value", [b"v", b"v" * 1024])  # through append-5, predicted (gateway/store/predicted.py)
async def test_a_batch_behind_one_refused_for_too_few_replicas_is_refused_alike_not_out_of_order(
        pair: Pair, value: bytes) -> None:  # noqa: F811
    """A producer's request pipelined behind one refused NOT_ENOUGH_REPLICAS met the in-sync set read
    again, the replica back, and was refused OUT_OF_ORDER_SEQUENCE_NUMBER; librdkafka then bumped its
    epoch and renumbered what it held unacknowledged, records stored on other partitions among them
    (soak cluster:341120687). Kafka refuses every batch alike while its ISR is short. Here the batch
    behind is refused NOT_ENOUGH_REPLICAS too, and both, sent again in order, are stored once each."""
    await pair.linked()
    async with running_gateway(test_config(pair.primary.url)) as gw:
        bs, port = kafka_bootstrap(gw), gw.listeners["kafka"].port
        await asyncio.to_thread(_create, bs, "t", 2)
        pair.replica.stop()
        await eventually(_answered(bs, ck.KafkaError.NOT_ENOUGH_REPLICAS), TIMEOUT, "NOT_ENOUGH_REPLICAS")
        assert await _produce_seq(port, 0, value) == KafkaError.not_enough_replicas  # the first, nothing written
        pair.replica.start()
        await pair.linked()
        await eventually(_answered(bs, 0), TIMEOUT, "the replica in sync again")
        assert await _produce_seq(port, 1, value) == KafkaError.not_enough_replicas  # the one behind: not out of order
        assert await _produce_seq(port, 0, value, 30_000) == KafkaError.none  # the producer's retries, in order
        assert await _produce_seq(port, 1, value, 30_000) == KafkaError.none
    with redis_sync.Redis(port=pair.primary.port) as r:
        headers = [parse_header(f[b"b"]) for _, f in r.xrange(keys.log("t", 0))]
    assert [h.base_sequence for h in headers if h.producer_id == 4242] == [0, 1]


async def test_a_batch_held_for_then_refused_for_good_holds_no_batch_behind_it(pair: Pair) -> None:  # noqa: F811
    """A transactional batch refused NOT_ENOUGH_REPLICAS, then, resent, INVALID_TXN_STATE (its
    transaction gone), is not coming again: the batch its producer pipelined behind it is answered
    for itself, not refused NOT_ENOUGH_REPLICAS to be retried after it until its delivery timeout
    (the soak's cluster:395738052: the transaction could not abort before then, and librdkafka's
    abort, bumping its epoch then, was fenced)."""
    await pair.linked()
    async with running_gateway(test_config(pair.primary.url)) as gw:
        bs, port = kafka_bootstrap(gw), gw.listeners["kafka"].port
        await asyncio.to_thread(_create, bs, "t", 2)
        conn = await asyncio.open_connection("127.0.0.1", port)
        init = await call(conn, ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": "tx", "transaction_timeout": 60_000})
        assert init.error_code == 0

        async def produce(seq: int) -> int:  # the transactional batch at `seq`, never added to a transaction
            b = BatchBuilder(producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=seq,
                             transactional=True)
            b.append(b"v", None, [], None)
            answer = await call(conn, ApiKey.PRODUCE, 9, {
                "transactional_id": "tx", "acks": -1, "timeout": 1000,
                "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b.build()}]}]})
            return int(answer.responses[0].partition_responses[0].error_code)

        pair.replica.stop()
        await eventually(_answered(bs, ck.KafkaError.NOT_ENOUGH_REPLICAS), TIMEOUT, "NOT_ENOUGH_REPLICAS")
        assert await produce(0) == KafkaError.not_enough_replicas  # held: nothing written, to be sent again
        pair.replica.start()
        await pair.linked()
        await eventually(_answered(bs, 0), TIMEOUT, "the replica in sync again")
        assert await produce(0) == KafkaError.invalid_txn_state  # for good: not sent again
        # answered for itself, not NOT_ENOUGH_REPLICAS: as Kafka's leader, verifying it with the
        # coordinator before its log looks at the sequence its producer skipped
        assert await produce(1) == KafkaError.invalid_txn_state


@pytest.mark.parametrize(("lag_max_ms", "timeout_ms", "first"), [
    (30_000, 1000, KafkaError.request_timed_out),  # the replica still in the set when the produce times out
    (2000, 30_000, KafkaError.not_enough_replicas_after_append),  # the replica out of the set first
])
async def test_a_batch_behind_one_its_replicas_did_not_confirm_is_not_refused_out_of_order_by_the_next_primary(
        tmp_path: Path, lag_max_ms: int, timeout_ms: int, first: KafkaError) -> None:
    """A producer's batch appended on a Cluster primary whose replica did not confirm it is answered
    REQUEST_TIMED_OUT or NOT_ENOUGH_REPLICAS_AFTER_APPEND (maybe stored); the primary is then
    replaced by that replica, which lacks it, and the batch the producer pipelined behind reaches
    the new primary: refused out of order there, librdkafka takes it for skipped sequences behind a
    failed request, bumps its epoch and renumbers every record it holds unacknowledged, batches
    stored on other partitions whose answers a closed connection lost among them: stored twice (the
    soak's cluster:688065516). Kafka's old leader
    answers both requests itself (NOT_LEADER_OR_FOLLOWER once deposed), never with the next one's
    log. The batch behind is refused NOT_ENOUGH_REPLICAS, as one behind a batch refused for too few
    replicas is, and both, sent again in order, are stored once each."""
    cluster = EmbeddedCluster(tmp_path / "cluster", replicas=1, node_timeout_ms=1000, fsync="always")
    cluster.start()
    try:
        async with running_gateway(test_config(cluster.url, replica_lag_max_ms=lag_max_ms)) as gw:
            bs, port = kafka_bootstrap(gw), gw.listeners["kafka"].port
            await asyncio.to_thread(_create, bs, "t", 2)
            old = _slot_owner(cluster, keys.log("t", 0))
            [replica] = [n for n in cluster.nodes if _info(n.port).get("master_port") == old]

            async def probe() -> bool:  # a plain acks=all produce, acknowledged once the gateway counts a replica
                [(err, _)] = await asyncio.to_thread(_produce, bs, [b"probe"], acks="all", retries=0,
                                                     **{"request.timeout.ms": 2000})
                return err is None
            await eventually(probe, TIMEOUT, "a produce acknowledged with the replica")
            assert await _produce_seq(port, 0) == KafkaError.none
            _stopped(replica)  # waited for while in the set, never confirming
            assert await _produce_seq(port, 1, timeout_ms=timeout_ms) == first
            # the primary and the paused replica killed (what the primary sent it, unread, goes with
            # it), the replica started again from its AOF and made to take the slots over
            primary = _restarted(cluster, old, start=False)
            _restarted(cluster, replica.port)
            with redis_sync.Redis(port=replica.port) as r:
                r.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
            await eventually(lambda: _quiet(lambda: _slot_owner(cluster, keys.log("t", 0), old) == replica.port),
                             TIMEOUT, "the replica's takeover")
            await asyncio.to_thread(primary.start)  # a replica of the new primary, what it alone held dropped
            await eventually(lambda: _quiet(lambda: _replica_synced(old) and _online_replicas(replica.port) == 1),
                             TIMEOUT, "the old primary back as a replica")
            await eventually(probe, TIMEOUT, "a produce acknowledged by the new primary and its replica")
            assert await _produce_seq(port, 2) == KafkaError.not_enough_replicas  # behind: not out of order
            assert await _produce_seq(port, 1, timeout_ms=30_000) == KafkaError.none  # the retries, in order
            assert await _produce_seq(port, 2, timeout_ms=30_000) == KafkaError.none
        with redis_sync.Redis(port=replica.port) as r:
            headers = [parse_header(f[b"b"]) for _, f in r.xrange(keys.log("t", 0))]
        assert [h.base_sequence for h in headers if h.producer_id == 4242] == [0, 1, 2]
    finally:
        cluster.stop()


def _restarted(cluster: EmbeddedCluster, port: int, start: bool = True) -> EmbeddedRedis:
    """The cluster's node at `port` SIGKILLed (stopped or not) and made again on its data dir, its
    identity and bus port kept; started unless `start` is False."""
    [node] = [n for n in cluster.nodes if n.port == port]
    assert node.proc is not None
    node.proc.kill()
    node.stop()
    again = EmbeddedRedis(node.data_dir, port=port, fsync=node.fsync, cluster=True, node_timeout_ms=node.node_timeout_ms)
    again.cluster_port = node.cluster_port
    cluster.nodes[cluster.nodes.index(node)] = again
    if start:
        again.start()
    return again


async def _paused_then_resumed(replica: EmbeddedRedis, ask: Callable[[], Awaitable[T]]) -> tuple[T, T]:
    """`ask`'s answer with `replica` paused, and again once it resumes."""
    pid = _stopped(replica)
    try:
        paused = await ask()
    finally:
        os.kill(pid, signal.SIGCONT)
    return paused, await ask()


async def test_a_txn_offset_commit_is_refused_invalid_txn_state_only_once_the_replicas_confirm_it(
        pair: Pair) -> None:  # noqa: F811
    """A transaction that lacks the group, read on a primary whose replicas do not confirm it, is not
    answered INVALID_TXN_STATE (fatal to the producer) but COORDINATOR_NOT_AVAILABLE, retriable: the
    primary may be one cut off with a minority, behind the new one that took the producer's
    AddOffsetsToTxn (tests/jepsen soak sentinel:957377018). Confirmed, the refusal stands."""
    await pair.linked()
    async with running_gateway(test_config(pair.primary.url)) as gw:
        port = gw.listeners["kafka"].port
        await asyncio.to_thread(_create, kafka_bootstrap(gw), "t", 1)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = (reader, writer)
        try:
            init = await call(conn, ApiKey.INIT_PRODUCER_ID, 4, {
                "transactional_id": "tx", "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1})
            pid, epoch = init.producer_id, init.producer_epoch

            async def commit_offsets() -> int:
                answer = await call(conn, ApiKey.TXN_OFFSET_COMMIT, 3, {
                    "transactional_id": "tx", "group_id": "g", "producer_id": pid, "producer_epoch": epoch,
                    "generation_id": -1, "member_id": "", "group_instance_id": None,
                    "topics": [{"name": "t", "partitions": [
                        {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                         "committed_metadata": ""}]}]})
                return int(answer.topics[0].partitions[0].error_code)

            assert await _paused_then_resumed(pair.replica, commit_offsets) == (
                KafkaError.coordinator_not_available, KafkaError.invalid_txn_state)
        finally:
            writer.close()


async def test_a_fenced_producer_is_told_so_only_once_the_replicas_confirm_it(pair: Pair) -> None:  # noqa: F811
    """A state change's refusal writes nothing, so a WAIT after it counted only what its connection
    had written before: a primary cut off from its replicas answered a fatal refusal from its own
    state. A read mark before the WAIT makes the refusal wait as a change does: with the replica
    paused, the fenced producer's AddOffsetsToTxn is COORDINATOR_NOT_AVAILABLE (retriable); once
    it resumes, PRODUCER_FENCED, as Kafka answers a v3 request of a fenced epoch."""
    await pair.linked()
    async with running_gateway(test_config(pair.primary.url)) as gw:
        await asyncio.to_thread(_create, kafka_bootstrap(gw), "t", 1)
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
        conn = (reader, writer)
        try:
            init = {"transactional_id": "tx", "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1}
            first = await call(conn, ApiKey.INIT_PRODUCER_ID, 4, init)
            await call(conn, ApiKey.INIT_PRODUCER_ID, 4, init)  # the next epoch: the first fenced
            written = pair.primary_info()["master_repl_offset"]
            # the replica has acknowledged all of it: a WAIT for what the connection wrote returns at once
            await eventually(lambda: pair.primary_info()["slave0"]["offset"] >= written, TIMEOUT, "the acknowledgement")

            async def add() -> int:
                answer = await call(conn, ApiKey.ADD_OFFSETS_TO_TXN, 3, {
                    "transactional_id": "tx", "producer_id": first.producer_id,
                    "producer_epoch": first.producer_epoch, "group_id": "g"})
                return int(answer.error_code)

            assert await _paused_then_resumed(pair.replica, add) == (
                KafkaError.coordinator_not_available, KafkaError.producer_fenced)
        finally:
            writer.close()


async def test_the_end_a_consumer_validates_its_position_against_is_read_as_a_fetch_reads(pair: Pair) -> None:  # noqa: F811
    """OffsetForLeaderEpoch's end offset, below a consumer's position, sends librdkafka back to it as
    to a truncated log, as OFFSET_OUT_OF_RANGE sends it to its reset policy: both are read on the
    primary only once its replicas confirm it (a primary cut off or paused through its failover has
    a log its successor may have moved past). Unconfirmed, the answer is an error the client retries;
    confirmed, the end."""
    await pair.linked()
    async with running_gateway(test_config(pair.primary.url)) as gw:
        bs = kafka_bootstrap(gw)
        await asyncio.to_thread(_create, bs, "t", 1)
        assert [err for err, _ in await asyncio.to_thread(_produce, bs, [b"a", b"b", b"c"])] == [None] * 3
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
        try:
            async def end() -> tuple[int, int]:
                answer = await call((reader, writer), ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {
                    "replica_id": -1, "topics": [{"topic": "t", "partitions": [
                        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
                p = answer.topics[0].partitions[0]
                return int(p.error_code), int(p.end_offset)

            assert await _paused_then_resumed(pair.replica, end) == ((KafkaError.kafka_storage_error, -1), (KafkaError.none, 3))
        finally:
            writer.close()
