"""Subscription modes, acks, redelivery and seek through the native client."""

from __future__ import annotations

import asyncio

import pytest

from gateway.client import Client, ConsumerBusy, MessageId, NotAllowed, Timeout
from gateway.formats.records import build_batch
from gateway.server.gateway import Gateway
from tests.conftest import native_url, test_config


@pytest.fixture
async def client(gateway):
    c = await Client.connect(native_url(gateway))
    yield c
    await c.close()


async def produce(client, topic: str, n: int, start: int = 0) -> list[MessageId]:
    """n messages, each its own batch, so dispatch can spread them one by one."""
    async with await client.create_producer(topic, batching=False) as p:
        return [await p.send(b"m%d" % i) for i in range(start, start + n)]


async def take(consumer, n: int) -> list:
    return [await consumer.receive(5) for _ in range(n)]


async def assert_silent(*consumers) -> None:
    """Nothing more arrives: a short bounded wait is the only way to see an absence."""
    for c in consumers:
        with pytest.raises(Timeout):
            await c.receive(0.2)


async def test_exclusive_refuses_a_second_consumer(client):
    first = await client.subscribe("ex", "s", "exclusive")
    with pytest.raises(ConsumerBusy):
        await client.subscribe("ex", "s", "exclusive")
    with pytest.raises(ConsumerBusy):
        await client.subscribe("ex", "s", "shared")
    await first.close()
    second = await client.subscribe("ex", "s", "exclusive")
    await second.close()


async def test_failover_hands_unacked_messages_to_the_next_consumer(client):
    active = await client.subscribe("fo", "s", "failover", "earliest")
    standby = await client.subscribe("fo", "s", "failover", "earliest")
    await produce(client, "fo", 5)
    got = await take(active, 5)
    assert [m.offset for m in got] == [0, 1, 2, 3, 4]
    await assert_silent(standby)
    await active.acknowledge(got[0])
    await active.acknowledge(got[2])
    await active.close()
    rest = await take(standby, 3)
    assert [m.offset for m in rest] == [1, 3, 4]
    await assert_silent(standby)


async def test_shared_spreads_without_duplicates(client):
    a = await client.subscribe("sh", "s", "shared", "earliest", receiver_queue_size=10)
    b = await client.subscribe("sh", "s", "shared", "earliest", receiver_queue_size=10)
    ids = await produce(client, "sh", 60)
    seen: dict[str, list[int]] = {"a": [], "b": []}
    done = asyncio.Event()

    async def run(name, consumer):
        while not done.is_set():
            try:
                m = await consumer.receive(0.1)
            except Timeout:
                continue
            seen[name].append(m.offset)
            await consumer.acknowledge(m)
            if len(seen["a"]) + len(seen["b"]) >= 60:
                done.set()

    await asyncio.wait_for(asyncio.gather(run("a", a), run("b", b)), 20)
    everything = seen["a"] + seen["b"]
    assert sorted(everything) == [m.offset for m in ids]
    assert seen["a"] and seen["b"]
    await assert_silent(a, b)


async def test_negative_ack_redelivers(client):
    c = await client.subscribe("nack", "s", "shared", "earliest", negative_ack_delay=0)
    await produce(client, "nack", 2)
    first, second = await take(c, 2)
    await c.acknowledge(second)
    await c.negative_acknowledge(first)
    again = await c.receive(5)
    assert (again.offset, again.value, again.redelivery_count) == (0, b"m0", 1)
    await c.acknowledge(again)
    await assert_silent(c)


async def test_ack_timeout_redelivers(client):
    c = await client.subscribe("ackt", "s", "shared", "earliest", ack_timeout=0.2)
    await produce(client, "ackt", 2)
    first, second = await take(c, 2)
    await c.acknowledge(second)
    again = await c.receive(5)
    assert (again.offset, again.redelivery_count) == (first.offset, 1)
    await c.acknowledge(again)


async def test_departing_shared_consumer_unacked_go_to_the_others(client):
    a = await client.subscribe("dep", "s", "shared", "earliest")
    b = await client.subscribe("dep", "s", "shared", "earliest")
    await produce(client, "dep", 10)
    got_b: list[int] = []
    first = await a.receive(5)
    await a.acknowledge(first)
    await a.close()  # whatever else a held goes to b
    while len(got_b) < 9:
        m = await b.receive(5)
        got_b.append(m.offset)
        await b.acknowledge(m)
    assert sorted(got_b + [first.offset]) == list(range(10))
    await assert_silent(b)


async def test_cumulative_ack(client):
    c = await client.subscribe("cum", "s", "exclusive", "earliest")
    await produce(client, "cum", 10)
    got = await take(c, 10)
    await c.acknowledge_cumulative(got[5])
    await c.close()
    c = await client.subscribe("cum", "s", "exclusive", "latest")
    assert [m.offset for m in await take(c, 4)] == [6, 7, 8, 9]
    shared = await client.subscribe("cum", "other", "shared", "earliest")
    with pytest.raises(NotAllowed):
        await shared.acknowledge_cumulative(got[0])


async def test_seek_to_message_id_offset_and_time(gateway, client):
    log = gateway.services.log
    await log.create_topic("seek", 1)
    for ts, v in ((1000, b"a"), (2000, b"b"), (3000, b"c")):
        await log.append([("seek", 0, build_batch([(None, v, [])], timestamp=ts))])
    c = await client.subscribe("seek", "s", "exclusive", "earliest", receiver_queue_size=100)
    got = await take(c, 3)
    for m in got:
        await c.acknowledge(m)
    await c.seek(got[1].message_id)
    assert [m.value for m in await take(c, 2)] == [b"b", b"c"]
    await c.seek(timestamp=2500)
    assert (await c.receive(5)).value == b"c"
    await c.seek(0)
    assert [m.value for m in await take(c, 3)] == [b"a", b"b", b"c"]
    await c.seek("latest")
    await assert_silent(c)


async def test_positions_and_individual_acks_survive_a_restart(redis_url):
    gw = Gateway(test_config(redis_url))
    await gw.start()
    try:
        async with await Client.connect(native_url(gw)) as client:
            c = await client.subscribe("dur", "s", "shared", "earliest")
            await produce(client, "dur", 10)
            got = await take(c, 10)
            for m in got:
                if m.offset < 5 or m.offset == 7:
                    await c.acknowledge(m)
    finally:
        await gw.stop()
    gw = Gateway(test_config(redis_url))
    await gw.start()
    try:
        async with await Client.connect(native_url(gw)) as client:
            # initial_position counts only at creation: "latest" does not skip the unacked ones
            c = await client.subscribe("dur", "s", "shared", "latest")
            again = await take(c, 3)
            assert [m.offset for m in again] == [5, 6, 8]
            assert [m.offset for m in await take(c, 1)] == [9]
            await assert_silent(c)
    finally:
        await gw.stop()


async def test_acks_survive_a_killed_gateway_process(gateway_process):
    await asyncio.to_thread(gateway_process.start)
    async with await Client.connect(gateway_process.native_url) as client:
        c = await client.subscribe("kill", "s", "shared", "earliest")
        await produce(client, "kill", 6)
        for m in await take(c, 6):
            if m.offset % 2 == 0:
                await c.acknowledge(m)
        await asyncio.to_thread(gateway_process.kill)
    await asyncio.to_thread(gateway_process.start)
    async with await Client.connect(gateway_process.native_url) as client:
        c = await client.subscribe("kill", "s", "shared", "earliest")
        assert [m.offset for m in await take(c, 3)] == [1, 3, 5]
        await assert_silent(c)
    await asyncio.to_thread(gateway_process.stop)


async def test_transactional_batches_wait_for_commit_and_aborted_ones_never_come(gateway, client):
    from gateway.formats.records import BatchBuilder

    log, tc = gateway.services.log, gateway.services.txn
    await log.create_topic("tx", 1)
    c = await client.subscribe("tx", "s", "exclusive", "earliest")

    async def in_txn(value: bytes, commit: bool) -> None:
        txn = await tc.begin()
        info = await tc.describe(txn)
        await tc.add_partitions(txn, [("tx", 0)])
        b = BatchBuilder(producer_id=info.producer_id, producer_epoch=info.producer_epoch, base_sequence=0,
                         transactional=True)
        b.append(value)
        await log.append([("tx", 0, b.build())])
        await assert_silent(c)  # held back while the transaction is open
        await tc.end(txn, commit=commit)

    await in_txn(b"aborted", commit=False)
    await in_txn(b"committed", commit=True)
    m = await c.receive(5)
    assert (m.value, m.offset) == (b"committed", 2)  # 0 aborted batch, 1 its marker
    await c.acknowledge(m)
    await assert_silent(c)


async def test_one_gateway_at_a_time_dispatches_a_subscription(gateway, client, redis_url):
    other = Gateway(test_config(redis_url, node_id=1))
    await other.start()
    try:
        async with await Client.connect(native_url(other)) as elsewhere:
            mine = await client.subscribe("lease", "s", "shared", "earliest")
            with pytest.raises(ConsumerBusy):
                await elsewhere.subscribe("lease", "s", "shared", "earliest")
            await elsewhere.subscribe("lease", "another", "shared")  # other subscriptions are free
            await mine.close()  # the lease goes with the last consumer
            theirs = await elsewhere.subscribe("lease", "s", "shared", "earliest")
            await produce(client, "lease", 1)
            assert (await theirs.receive(5)).offset == 0
    finally:
        await other.stop()


async def test_shared_over_partitions_and_seek_replays_them_all(gateway, client):
    await gateway.services.log.create_topic("parts", 3)
    a = await client.subscribe("parts", "s", "shared", "earliest", receiver_queue_size=5)
    b = await client.subscribe("parts", "s", "shared", "earliest", receiver_queue_size=5)
    async with await client.create_producer("parts", batching=False) as p:
        ids = {await p.send(b"v", key=b"k%d" % i) for i in range(30)}
    assert {mid.partition for mid in ids} == {0, 1, 2}
    got: list = []

    async def run(consumer):
        while len(got) < 30:
            try:
                m = await consumer.receive(0.1)
            except Timeout:
                continue
            got.append(m.message_id)
            await consumer.acknowledge(m)

    await asyncio.wait_for(asyncio.gather(run(a), run(b)), 20)
    assert sorted(got) == sorted(ids)
    await b.close()
    await a.seek(0)
    replay = [(await a.receive(5)).message_id for _ in range(30)]
    assert sorted(replay) == sorted(ids)
    await assert_silent(a)


async def test_runs_of_acked_batches_are_skipped_without_waiting(client):
    c = await client.subscribe("skip", "s", "shared", "earliest")
    await produce(client, "skip", 150)
    for m in await take(c, 150):
        if m.offset not in (0, 149):
            await c.acknowledge(m)
    await c.close()  # the gateway forgets the subscription; its acks stay in Redis
    c = await client.subscribe("skip", "s", "shared", "earliest")
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert [m.offset for m in await take(c, 2)] == [0, 149]
    assert loop.time() - started < 0.8  # three reads of acked batches, none waiting for a poll


async def test_unsubscribe_deletes_the_position(gateway, client, raw_redis):
    c = await client.subscribe("unsub", "s", "shared", "earliest")
    other = await client.subscribe("unsub", "s", "shared", "earliest")
    await produce(client, "unsub", 2)
    with pytest.raises(NotAllowed):
        await c.unsubscribe()  # someone else still uses it
    await other.close()
    m = await c.receive(5)
    await c.acknowledge(m)
    await c.unsubscribe()
    redis = raw_redis
    assert await redis.keys("*sub:s*") == [] and await redis.keys("*acks:s*") == []
    c = await client.subscribe("unsub", "s", "shared", "latest")  # created afresh, at the end
    await assert_silent(c)


async def test_partitions_added_later_are_consumed(gateway, client, monkeypatch):
    import gateway.domain.subscriptions as subscriptions

    monkeypatch.setattr(subscriptions, "_RENEW_EVERY", 0.05)  # look for new partitions at once
    log = gateway.services.log
    await log.create_topic("grow", 1)
    c = await client.subscribe("grow", "s", "exclusive", "latest")
    await log.add_partitions("grow", 2)
    await log.append([("grow", 1, build_batch([(None, b"new", [])]))])
    m = await c.receive(5)
    assert (m.partition, m.offset, m.value) == (1, 0, b"new")
