"""A replica out of its primary's in-sync set is never promoted, as Kafka elects a leader only from its
ISR (`unclean.leader.election.enable=false`). Found by tests/jepsen's soak (sentinel:923530612): with
one replica left behind by packet loss, the other killed and the primary cut off, the Sentinels
promoted the one left behind, which lacked what was acknowledged without it, and a consumer's
offset was past its end. Here the replica is held behind by a relay on its link from the primary."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis as redis_sync
import redis.asyncio as aioredis
from kio.schema.errors import ErrorCode as KafkaError

from gateway.store import keys
from tests.conftest import eventually, kafka_bootstrap, running_gateway, test_config
from tests.test_acks_all import _create
from tests.test_failover import (  # noqa: F401 (group: the fixture)
    SERVICE,
    TIMEOUT,
    SentinelGroup,
    _log_values,
    _online_replicas,
    _replica_synced,
    group,
)
from tests.test_in_sync_replicas import _produce_once
from tests.test_txn_late_end import holding_relay

pytestmark = pytest.mark.slow


def _priority(port: int) -> int:
    with redis_sync.Redis(port=port, decode_responses=True) as r:
        return int(r.config_get("replica-priority")["replica-priority"])


def _sentinels_rank(sentinels: SentinelGroup, port: int) -> set[int]:
    """The priority each Sentinel has read for the replica at `port` (from its INFO)."""
    seen = set()
    for sentinel, _ in sentinels.sentinels:
        with redis_sync.Redis(port=sentinel, decode_responses=True) as s:
            for replica in s.sentinel_slaves(SERVICE):
                if int(replica["port"]) == port:
                    seen.add(int(replica["slave-priority"]))
    return seen


def _failover_timeout(sentinels: SentinelGroup, ms: int) -> None:
    for sentinel, _ in sentinels.sentinels:
        with redis_sync.Redis(port=sentinel) as s:
            s.execute_command("SENTINEL", "SET", SERVICE, "failover-timeout", ms)


async def test_a_replica_out_of_the_in_sync_set_is_not_promoted_when_the_one_in_it_is_gone(
        group: SentinelGroup, tmp_path: Path) -> None:  # noqa: F811
    primary, kept = group.primary_port(), group.replica_port()
    # a replica of another address than the primary's is set right by the Sentinels after their
    # failover timeout (+fix-slave-config): the relay's replica is left as it is until the primary is gone
    _failover_timeout(group, 600_000)
    async with holding_relay(primary, b"", replies=True) as (relay, flowing, _):
        late = await asyncio.to_thread(group._node, tmp_path / "late", relay)  # its link to the primary relayed
        await eventually(lambda: _replica_synced(late.port) and _online_replicas(primary) == 2, TIMEOUT,
                         "two replicas")
        await eventually(lambda: _sentinels_rank(group, late.port) == {100}, TIMEOUT, "the Sentinels to know it")
        async with running_gateway(test_config(group.url, replica_lag_max_ms=2000)) as gw:
            bs = kafka_bootstrap(gw)
            await asyncio.to_thread(_create, bs, "t", 2)
            port = gw.listeners["kafka"].port
            acked: list[bytes] = []

            async def produce() -> None:
                value = b"v%d" % len(acked)
                try:
                    err, _ = await _produce_once(port, value, 10_000)
                except (ConnectionError, asyncio.IncompleteReadError):
                    return  # closed amid the failover, as a leader gone mid-request closes it: not acknowledged
                if err == KafkaError.none:
                    acked.append(value)

            await produce()
            flowing.clear()  # the late replica keeps acknowledging, and falls behind

            async def demoted() -> bool:  # the gateway reads the set as it writes
                await produce()
                return _priority(late.port) == 0 and _sentinels_rank(group, late.port) == {0}
            await eventually(demoted, TIMEOUT, "the late replica kept from promotion")
            assert _priority(kept) == 100  # in the set: promotable as before
            await produce()
            assert len(acked) >= 3  # acknowledged without the late replica, which lacks them

            # the leader of the failover, whichever Sentinel it is, says it found no replica to promote
            sentinels = [aioredis.Redis(port=port) for port, _ in group.sentinels]
            events = [s.pubsub() for s in sentinels]
            try:
                for e in events:
                    await e.subscribe("-failover-abort-no-good-slave")
                    await e.get_message(timeout=1)  # the subscription's confirmation
                kept_dir = group.nodes[kept].data_dir
                _failover_timeout(group, 2_000)
                for node in (group.nodes[kept], group.nodes[primary]):  # the in-sync replica, then the primary
                    assert node.proc is not None
                    node.proc.kill()
                    node.stop()

                async def refused() -> bool:
                    got = [await e.get_message(ignore_subscribe_messages=True, timeout=0.3) for e in events]
                    return any(m is not None for m in got)
                # no replica to promote: the late one is out of the set, the kept one dead
                await eventually(refused, TIMEOUT, "the Sentinels to find no replica to promote")
            finally:
                for e in events:
                    await e.aclose()
                for s in sentinels:
                    await s.aclose()
            assert group.primary_port() == primary
            flowing.set()

            # the in-sync replica back (its AOF): promoted, with every acknowledged record
            await asyncio.to_thread(group._node, kept_dir, primary, kept)
            assert await group.promoted(primary) == kept
            assert set(acked) <= set(await asyncio.to_thread(_log_values, bs, "t"))

            async def restored() -> bool:  # the late replica, following the new primary, caught up
                await produce()
                return _priority(late.port) == 100
            await eventually(restored, TIMEOUT, "the late replica's priority back")
            with redis_sync.Redis(port=kept) as r:
                assert r.hlen(keys.DEMOTED_REPLICAS) == 0
