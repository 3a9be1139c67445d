"""The subscription cursor scripts on a real Redis: contiguous acks move the cursor, gaps wait."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.domain.log import LogService
from gateway.errors import ConsumerBusy, SubscriptionNotFound
from gateway.formats.records import build_batch
from gateway.store import Store, keys
from gateway.store.connection import RedisClient
from gateway.store.subscriptions import SubscriptionStore
from tests.conftest import eventually

Env = tuple[LogService, SubscriptionStore, RedisClient]


@pytest.fixture
async def env(redis_url: str, raw_redis: RedisClient) -> AsyncIterator[Env]:
    store = Store.open(redis_url)
    logs = LogService(store, auto_create=False)
    await logs.create_topic("t", 1)
    await logs.append([("t", 0, build_batch([(None, b"%d" % i, []) for i in range(10)]))])
    yield logs, store.subscriptions, raw_redis
    await store.close()


async def test_initial_position_only_when_created(env: Env) -> None:
    _, subs, _ = env
    (pos,) = await subs.open("t", range(1), "late", initial="latest", mode="shared")
    assert (pos.cursor, pos.created) == (10, True)
    (pos,) = await subs.open("t", range(1), "early", initial="earliest", mode="shared")
    assert pos.cursor == 0
    (pos,) = await subs.open("t", range(1), "late", initial="earliest", mode="shared")
    assert (pos.cursor, pos.created) == (10, False)


async def test_out_of_order_acks_wait_until_contiguous(env: Env) -> None:
    _, subs, redis = env
    await subs.open("t", range(1), "s", initial="earliest", mode="shared")
    assert await subs.ack("t", "s", {0: (-1, [1, 2, 5])}) == {0: 0}
    assert await redis.zcard(keys.sub_acks("t", 0, "s")) == 3
    assert await subs.acked_in("t", "s", {0: (0, 10)}) == {0: {1, 2, 5}}
    assert await subs.ack("t", "s", {0: (-1, [0])}) == {0: 3}
    assert await subs.acked_in("t", "s", {0: (0, 10)}) == {0: {5}}
    (pos,) = await subs.open("t", range(1), "s", initial="earliest", mode="shared")
    assert (pos.cursor, pos.max_acked) == (3, 5)
    assert await subs.ack("t", "s", {0: (5, [])}) == {0: 6}  # cumulative over the gap absorbs 5
    assert await redis.zcard(keys.sub_acks("t", 0, "s")) == 0


async def test_seek_clamps_and_forgets_acks(env: Env) -> None:
    logs, subs, _ = env
    await subs.open("t", range(1), "s", initial="earliest", mode="exclusive")
    await subs.ack("t", "s", {0: (-1, [4, 7])})
    assert await subs.seek("t", "s", {0: 99}) == {0: 10}
    assert await subs.seek("t", "s", {0: -1}) == {0: 0}
    assert await subs.acked_in("t", "s", {0: (0, 10)}) == {0: set()}
    await logs.delete_records("t", 0, 4)
    assert await subs.seek("t", "s", {0: 2}) == {0: 4}
    assert await subs.ack("t", "s", {0: (-1, [])}) == {0: 4}


async def test_acks_on_a_missing_subscription_are_refused(env: Env) -> None:
    _, subs, _ = env
    with pytest.raises(SubscriptionNotFound):
        await subs.ack("t", "nope", {0: (-1, [1])})


async def test_delivery_counts_stop_at_the_limit_and_go_once_acknowledged(env: Env) -> None:
    _, subs, redis = env
    await subs.open("t", range(1), "s", initial="earliest", mode="shared")
    counts = keys.sub_deliveries("t", 0, "s")
    assert await subs.delivered("t", "s", 2, {0: [0, 1]}) == {0: None}  # first deliveries: nothing per offset
    assert await redis.hgetall(counts) == {b"next": b"2"}
    assert await subs.delivered("t", "s", 2, {0: [0]}) == {0: {0: 2}}
    assert await subs.delivered("t", "s", 2, {0: [0, 1, 2]}) == {0: {0: -2, 1: 2, 2: 1}}  # 0 at the limit: not again
    # acknowledged (below the cursor, or individually above it): swept once the counts have grown
    await subs.delivered("t", "s", 5, {0: list(range(3, 1200))})
    await subs.delivered("t", "s", 5, {0: list(range(2, 1100))})  # past 1024 counts: swept (nothing to drop)
    assert await subs.ack("t", "s", {0: (-1, [0, 1, *range(3, 1099)])}) == {0: 2}
    await subs.delivered("t", "s", 5, {0: list(range(1100, 1200)) + list(range(1200, 2300))})
    await subs.delivered("t", "s", 5, {0: list(range(1200, 2300))})  # doubled since: swept
    assert sorted(int(f) for f in await redis.hkeys(counts) if f != b"next") == [2, 1099, *range(1100, 2300)]
    await subs.seek("t", "s", {0: 0})  # a seek starts the records afresh
    assert not await redis.exists(counts)
    assert await subs.delivered("t", "s", 2, {0: [0, 1]}) == {0: None}


async def test_a_delivery_taken_back_is_not_counted(env: Env) -> None:
    """Offsets handed out but never sent (`undelivered`): a first delivery goes back to none, a later
    one to the count before it, and one never counted is left alone; the next delivery of each
    counts from there."""
    _, subs, redis = env
    await subs.open("t", range(1), "s", initial="earliest", mode="shared")
    await subs.delivered("t", "s", 5, {0: [0, 1, 2, 3]})
    await subs.delivered("t", "s", 5, {0: [1]})  # 1 delivered twice
    await subs.undelivered("t", "s", {0: [0, 1, 2, 7]})  # 7 was never handed out
    assert await subs.delivered("t", "s", 5, {0: [0, 1, 2, 3, 7]}) == {0: {0: 1, 1: 2, 2: 1, 3: 2, 7: 1}}
    await subs.undelivered("t", "nope", {0: [0]})  # no subscription: nothing kept
    assert not await redis.exists(keys.sub_deliveries("t", 0, "nope"))


async def test_whole_and_partition_dispatch_leases_exclude_each_other(env: Env) -> None:
    """A subscription is dispatched whole by one gateway, or partition by partition: node 1 holding
    partitions keeps node 2 from the whole, node 2 holding the whole keeps node 1 from any partition,
    and a lease given up or run out is anyone's."""
    _, subs, _ = env
    assert await subs.lease_partitions("t", "s", 1, 60_000, [0, 2]) == {}
    assert await subs.lease_partitions("t", "s", 2, 60_000, [1, 2]) == {2: 1}  # 1 is node 2's now
    with pytest.raises(ConsumerBusy):
        await subs.lease("t", "s", 3, 60_000)
    await subs.lease_partitions("t", "s", 1, 0, [0, 2])
    await subs.lease_partitions("t", "s", 2, 0, [1])
    await subs.lease("t", "s", 3, 60_000)
    assert await subs.lease_partitions("t", "s", 1, 60_000, [0]) == {0: 3}
    await subs.lease("t", "s", 3, 0)
    assert await subs.lease_partitions("t", "s", 1, 1, [0]) == {}  # a lease of 1 ms runs out at once
    await eventually(lambda: _free(subs), what="the partition lease running out")


async def _free(subs: SubscriptionStore) -> bool:
    return await subs.lease_partitions("t", "s", 2, 60_000, [0]) == {}
