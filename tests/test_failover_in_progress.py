"""A Sentinel failover caught half-way, as soak sentinel:929668516 caught one: the primary was paused
past the Sentinels' patience, their leader told a replica `REPLICAOF NO ONE`, and the primary
resumed before the promotion was confirmed. The Sentinels still named it, the replica it kept
acknowledged its writes to WAIT, and once the failover ended they were gone: acks=all records (then
librdkafka's fatal OUT_OF_ORDER_SEQUENCE_NUMBER on the promoted primary, which lacked them) and a
transaction's partitions (then INVALID_TXN_STATE for its abort, fatal too); and, replayed once those
were fixed, polls of records then gone and a producer id the new primary handed out again (ids
now come from blocks reserved durably).

Here the failover is held at that point on purpose: the replica to be promoted is stopped as the
Sentinel leader picks it, so the leader waits for its promotion, flagged as failing the primary over,
while the primary keeps a second replica (priority 0: never promoted) that acknowledges its writes.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import confluent_kafka as ck
import pytest
import redis as redis_sync

from gateway.errors import StorageUnavailable
from gateway.kafka.dispatch import ApiKey
from gateway.store import keys
from tests.conftest import eventually, kafka_bootstrap, running_gateway, test_config
from tests.kafka_wire import call
from tests.test_acks_all import _create, _produce
from tests.test_failover import (  # noqa: F401 (group: the fixture)
    SERVICE,
    TIMEOUT,
    _info,
    _log_values,
    _online_replicas,
    _replica_synced,
    group,
)

ONCE = {"acks": "all", "enable.idempotence": False, "retries": 0}  # one try: its answer is the gateway's


def _holds(replica: int, offset: int) -> bool:
    """The replica has what its primary had written up to `offset` of its replication stream."""
    return int(_info(replica, "replication").get("slave_repl_offset", -1)) >= offset


def _flags(sentinel: int) -> set[str]:
    with redis_sync.Redis(port=sentinel, decode_responses=True) as s:
        return set(str(s.execute_command("SENTINEL", "MASTER", SERVICE)["flags"]).split(","))


async def _add_partition(conn: Any, tid: str, pid: int, epoch: int) -> int:
    """AddPartitionsToTxn v3 of t-0 (librdkafka's version); its error code."""
    answer = await call(conn, ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})
    return int(answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


async def test_a_primary_being_failed_over_acknowledges_nothing_its_replicas_confirm(group, tmp_path):  # noqa: F811
    primary, doomed = group.primary_port(), group.replica_port()
    kept = group._node(tmp_path / "kept", primary)  # a second replica, which Sentinel never promotes
    with redis_sync.Redis(port=kept.port) as r:
        r.config_set("replica-priority", 0)
    await eventually(lambda: _replica_synced(kept.port) and _online_replicas(primary) == 2, TIMEOUT, "two replicas")
    leader = group.sentinels[0][0]
    with redis_sync.Redis(port=leader) as s:  # the failover held until the test is over
        s.execute_command("SENTINEL", "SET", SERVICE, "failover-timeout", 600_000)
    async with running_gateway(test_config(group.url)) as gw:
        bs = kafka_bootstrap(gw)
        await asyncio.to_thread(_create, bs, "t", 2)
        conn = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
        init = await call(conn, ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": "tx", "transaction_timeout": 60_000})
        assert init.error_code == 0
        # the replica to be promoted has the block of producer ids that id came from: the WAIT that
        # reserved it needed one replica, and the kept one may have been it
        written = int(_info(primary, "replication")["master_repl_offset"])
        await eventually(lambda: _holds(doomed, written), TIMEOUT, "the reservation on the replica to be promoted")
        node = group.nodes[doomed].proc
        assert node is not None
        with redis_sync.Redis(port=leader) as s:
            s.execute_command("SENTINEL", "FAILOVER", SERVICE)
        os.kill(node.pid, signal.SIGSTOP)  # before the leader can see it promoted
        try:
            with redis_sync.Redis(port=primary) as r:  # it is gone from the primary, as a promoted replica is
                r.execute_command("CLIENT", "KILL", "TYPE", "replica")
            await eventually(lambda: _replica_synced(kept.port) and _online_replicas(primary) == 1, TIMEOUT,
                             "the kept replica back")
            await eventually(lambda: "failover_in_progress" in _flags(leader), TIMEOUT, "the failover under way")
            assert group.primary_port() == primary  # still named by the Sentinels, as in the soak

            [(err, _)] = await asyncio.to_thread(_produce, bs, [b"lost"], **ONCE)
            # where it will be is unknown: the connection closes, as from a leader gone mid-request
            assert err is not None and err.code() == ck.KafkaError._TRANSPORT
            assert await _add_partition(conn, "tx", init.producer_id, init.producer_epoch) == 15  # COORDINATOR_NOT_AVAILABLE
            # a producer id: from the block of ids the gateway reserved before, which the new primary holds
            fresh = await call(conn, ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout": 60_000})
            assert fresh.error_code == 0
            assert gw.services is not None
            with pytest.raises(StorageUnavailable):  # the record read may be gone with it: KAFKA_STORAGE_ERROR
                await gw.services.log.read("t", 0, 0)
            # and with no replica left to confirm a read (the kept one stopped too, its link dropped)
            assert kept.proc is not None and gw.store is not None
            os.kill(kept.proc.pid, signal.SIGSTOP)
            with redis_sync.Redis(port=primary) as r:
                r.execute_command("CLIENT", "KILL", "TYPE", "replica")
            replication = gw.store.replication

            async def none_online() -> bool:  # as the gateway reads it, again after a second
                return await replication.online(keys.log("t", 0)) == 0
            await eventually(none_online, TIMEOUT, "no replica online")
            with pytest.raises(StorageUnavailable):
                await gw.services.log.read("t", 0, 0)
        finally:
            os.kill(node.pid, signal.SIGCONT)
            if kept.proc is not None:
                os.kill(kept.proc.pid, signal.SIGCONT)
        conn[1].close()
        # once the failover ends the old primary is replaced for good, though the gateway follows the
        # new epoch by then (a late write's WAIT on the old one was vouched for: a replay)
        new = await group.promoted(primary)
        sentinel = gw.store._redis  # type: ignore[union-attr]
        await eventually(lambda: sentinel.sentinels.epoch >= 1, TIMEOUT, "the new epoch followed")
        await eventually(lambda: "failover_in_progress" not in _flags(leader), TIMEOUT, "the failover's end")
        assert await sentinel.replacing(("127.0.0.1", primary)) == f"the Sentinels name 127.0.0.1:{new} at config epoch 1"
        assert await sentinel.replacing(("127.0.0.1", new)) is None
        async with running_gateway(test_config(group.url)) as later:  # its ids come from the new primary
            assert later.services is not None
            assert await later.services.log.allocate_producer_id() > fresh.producer_id


async def test_a_primary_short_of_a_replica_with_no_failover_under_way_goes_on(group, tmp_path):  # noqa: F811
    """The other side: a replica gone with no failover (stopped, or cut off) leaves the primary in
    place, and a replica that holds the write is enough, as a follower out of Kafka's ISR is."""
    primary, gone = group.primary_port(), group.replica_port()
    kept = group._node(tmp_path / "kept", primary)
    await eventually(lambda: _replica_synced(kept.port) and _online_replicas(primary) == 2, TIMEOUT, "two replicas")
    async with running_gateway(test_config(group.url)) as gw:
        bs = kafka_bootstrap(gw)
        await asyncio.to_thread(_create, bs, "t", 2)
        group.nodes[gone].stop()
        await eventually(lambda: _online_replicas(primary) == 1, TIMEOUT, "one replica gone")
        [(err, offset)] = await asyncio.to_thread(_produce, bs, [b"kept"], **ONCE)
        assert err is None and offset == 0
        assert gw.services is not None
        assert [e.base_offset for e in (await gw.services.log.read("t", 0, 0)).entries] == [0]
        assert await asyncio.to_thread(_log_values, bs, "t") == [b"kept"]
