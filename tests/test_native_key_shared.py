"""Key_Shared subscriptions through the native client, on real gateways and Redis: per-key order,
one consumer per key at a time, rebalancing as consumers come and go, and gateways sharing one.

Each run records a history (every receive and every finished ack, in the order the one event loop
saw them) and one checker reads it, rather than assertions sprinkled through the loops."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

from gateway.client import Client, ConsumerBusy, InvalidRequest, MessageId, NotAllowed, Timeout
from gateway.domain.key_shared import HashRing, murmur3_32, sticky_hash
from gateway.store.key_shared import Member
from tests.conftest import native_url, running_gateway, test_config


@dataclass
class History:
    """("recv" | "acked", consumer, key, seq) in the order they happened."""

    events: list[tuple[str, str, str, int]] = field(default_factory=list)

    def check(self, keys: int, per_key: int) -> dict[str, set[str]]:
        """Every message received exactly once, each key's in order, and a key never received by one
        consumer while another still holds an unacknowledged message of it. Returns the keys each
        consumer had."""
        next_seq: dict[str, int] = defaultdict(int)
        holder: dict[str, tuple[str, int]] = {}  # key -> (consumer, unacked count)
        had: dict[str, set[str]] = defaultdict(set)
        for kind, consumer, key, seq in self.events:
            if kind == "recv":
                assert seq == next_seq[key], f"{key}: got {seq} after {next_seq[key] - 1} ({consumer})"
                next_seq[key] += 1
                who, n = holder.get(key, (consumer, 0))
                assert who == consumer or n == 0, f"{key}#{seq} to {consumer} while {who} holds {n} of it"
                holder[key] = (consumer, n + 1 if who == consumer else 1)
                had[consumer].add(key)
            else:
                who, n = holder[key]
                assert who == consumer
                holder[key] = (who, n - 1)
        assert dict(next_seq) == {f"k{i}": per_key for i in range(keys)}
        return had


async def consume(name: str, consumer, history: History, stop: asyncio.Event) -> None:
    """Receive and acknowledge until `stop`; the ack is awaited, so it is recorded once done."""
    while not stop.is_set():
        try:
            m = await consumer.receive(0.1)
        except Timeout:
            continue
        key, seq = m.value.decode().split(":")
        history.events.append(("recv", name, key, int(seq)))
        await consumer.acknowledge(m)
        history.events.append(("acked", name, key, int(seq)))


async def produce(client: Client, topic: str, keys: int, per_key: int) -> None:
    """Round-robin over the keys, batched (so a stored batch holds records of many keys)."""
    async with await client.create_producer(topic) as p:
        sends = []
        for seq in range(per_key):
            for k in range(keys):
                sends.append(asyncio.ensure_future(p.send(b"k%d:%d" % (k, seq), key=b"k%d" % k)))
        await asyncio.gather(*sends)


async def until(history: History, n: int, kind: str = "recv") -> None:
    """Wait for the n-th receive (or ack): polled, as no event announces a count reached."""
    while sum(1 for e in history.events if e[0] == kind) < n:
        await asyncio.sleep(0.01)


def test_murmur3_and_the_ring_are_pulsars():
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"hello") == 0x248BFA47  # the reference vector of MurmurHash3_x86_32
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723
    assert 0 <= sticky_hash(b"k") < 65536 and sticky_hash(None) == sticky_hash(b"NONE_KEY")
    ring = HashRing((Member("1.1", "a"), Member("1.2", "b"), Member("1.3", "c")))
    owners = {ring.select(sticky_hash(b"k%d" % i)) for i in range(200)}
    assert owners == {"1.1", "1.2", "1.3"}
    fewer = HashRing((Member("1.1", "a"), Member("1.3", "c")))
    # removing a consumer moves only its keys
    for i in range(200):
        h = sticky_hash(b"k%d" % i)
        if ring.select(h) != "1.2":
            assert fewer.select(h) == ring.select(h)


@pytest.mark.slow
async def test_key_shared_keeps_per_key_order_while_consumers_come_and_go(gateway):
    keys, per_key = 50, 80  # 4,000 messages: a leave at 1,200, a join at 2,400, each key's order across both
    await gateway.services.log.create_topic("ks", 2)
    history, stops = History(), {n: asyncio.Event() for n in ("c1", "c2", "c3", "c4")}
    async with await Client.connect(native_url(gateway)) as client:
        consumers = {n: await client.subscribe("ks", "s", "key_shared", "earliest", consumer_name=n,
                                               receiver_queue_size=100)
                     for n in ("c1", "c2", "c3")}
        loops = {n: asyncio.create_task(consume(n, c, history, stops[n])) for n, c in consumers.items()}
        producing = asyncio.create_task(produce(client, "ks", keys, per_key))
        await asyncio.wait_for(until(history, 1200), 60)
        stops["c2"].set()  # c2 leaves mid-stream: its keys, and what it had not received, go on
        await loops.pop("c2")
        await consumers.pop("c2").close()
        left_at = len(history.events)
        await asyncio.wait_for(until(history, 2400), 60)
        consumers["c4"] = await client.subscribe("ks", "s", "key_shared", consumer_name="c4", receiver_queue_size=100)
        joined_at = len(history.events)
        loops["c4"] = asyncio.create_task(consume("c4", consumers["c4"], history, stops["c4"]))
        await producing
        await asyncio.wait_for(until(history, keys * per_key), 120)
        for n in loops:
            stops[n].set()
        await asyncio.gather(*loops.values())
        had = history.check(keys, per_key)
        after_leaving = {e[1] for e in history.events[left_at:]}
        assert "c2" not in after_leaving
        assert {e[1] for e in history.events[joined_at:]} >= {"c4"}  # the newcomer took keys over
        assert all(had[n] for n in ("c1", "c2", "c3", "c4"))
        for c in consumers.values():
            with pytest.raises(Timeout):  # nothing more: a bounded wait is the only way to see an absence
                await c.receive(0.2)
            with pytest.raises(NotAllowed):  # acks are individual, as on Pulsar's Key_Shared
                await c.acknowledge_cumulative(MessageId("ks", 0, 0))


async def test_a_key_shared_subscription_served_by_two_gateways(gateway, redis_url):
    keys, per_key = 20, 50
    await gateway.services.log.create_topic("ks2", 1)
    history, stop = History(), asyncio.Event()
    async with running_gateway(test_config(redis_url, node_id=1)) as other:
        async with (await Client.connect(native_url(gateway)) as here,
                    await Client.connect(native_url(other)) as there):
            a = await here.subscribe("ks2", "s", "key_shared", "earliest", consumer_name="a", receiver_queue_size=20)
            b = await there.subscribe("ks2", "s", "key_shared", "earliest", consumer_name="b",
                                      receiver_queue_size=20)
            loops = [asyncio.create_task(consume("a", a, history, stop)),
                     asyncio.create_task(consume("b", b, history, stop))]
            await produce(here, "ks2", keys, per_key)
            await asyncio.wait_for(until(history, keys * per_key), 60)
            stop.set()
            await asyncio.gather(*loops)
            had = history.check(keys, per_key)
            assert had["a"] and had["b"]


async def test_unsubscribe_removes_a_key_shared_subscription_and_its_state(client, raw_redis):
    c = await client.subscribe("ksu", "s", "key_shared", "earliest", consumer_name="only")
    async with await client.create_producer("ksu") as p:
        await p.send(b"k0:0", key=b"k0")
    await c.acknowledge(await c.receive(5))
    assert await raw_redis.keys("*sticky:s") and await raw_redis.keys("*ksmembers:s")
    await c.unsubscribe()
    assert await raw_redis.keys("*:s") == [] and await raw_redis.keys("*acks:s*") == []
    again = await client.subscribe("ksu", "s", "key_shared", "latest")  # created afresh, at the end
    with pytest.raises(Timeout):
        await again.receive(0.2)


async def test_seek_restarts_every_key_from_the_new_position(client):
    a = await client.subscribe("kss", "s", "key_shared", "earliest", consumer_name="a")
    b = await client.subscribe("kss", "s", "key_shared", "earliest", consumer_name="b")
    await produce(client, "kss", 10, 3)
    history, stop = History(), asyncio.Event()
    loops = [asyncio.create_task(consume("a", a, history, stop)), asyncio.create_task(consume("b", b, history, stop))]
    await asyncio.wait_for(until(history, 30, "acked"), 20)  # all acknowledged: none in flight over the seek
    mark = len(history.events)
    await a.seek("earliest")  # everything again, each key in order, one consumer at a time
    await asyncio.wait_for(until(history, 60), 20)
    stop.set()
    await asyncio.gather(*loops)
    History(history.events[:mark]).check(10, 3)
    History(history.events[mark:]).check(10, 3)


async def test_sticky_ranges_take_their_keys_and_refuse_overlaps(client):
    lower, upper = (0, 32767), (32768, 65535)
    a = await client.subscribe("ksr", "s", "key_shared", "earliest", consumer_name="a", sticky_ranges=[lower])
    with pytest.raises(ConsumerBusy):  # overlapping a's
        await client.subscribe("ksr", "s", "key_shared", consumer_name="x", sticky_ranges=[(30000, 40000)])
    with pytest.raises(ConsumerBusy):  # on the ring beside a sticky consumer
        await client.subscribe("ksr", "s", "key_shared", consumer_name="y")
    with pytest.raises(InvalidRequest):
        await client.subscribe("ksr", "s", "key_shared", consumer_name="z", sticky_ranges=[(0, 70000)])
    await produce(client, "ksr", 20, 2)
    history, stop = History(), asyncio.Event()
    loops = [asyncio.create_task(consume("a", a, history, stop))]
    mine = sum(1 for k in range(20) if sticky_hash(b"k%d" % k) <= lower[1])
    await asyncio.wait_for(until(history, 2 * mine), 20)  # the upper keys wait for a consumer of them
    b = await client.subscribe("ksr", "s", "key_shared", consumer_name="b", sticky_ranges=[upper])
    loops.append(asyncio.create_task(consume("b", b, history, stop)))
    await asyncio.wait_for(until(history, 40), 20)
    stop.set()
    await asyncio.gather(*loops)
    had = history.check(20, 2)
    assert all(sticky_hash(k.encode()) <= lower[1] for k in had["a"])
    assert all(sticky_hash(k.encode()) >= upper[0] for k in had["b"])


async def test_a_subscription_is_key_shared_or_another_mode_across_gateways(gateway, redis_url):
    async with running_gateway(test_config(redis_url, node_id=1)) as other:
        async with (await Client.connect(native_url(gateway)) as here,
                    await Client.connect(native_url(other)) as there):
            shared = await here.subscribe("ksm", "s", "shared")
            with pytest.raises(ConsumerBusy):
                await there.subscribe("ksm", "s", "key_shared")
            await shared.close()
            keyed = await there.subscribe("ksm", "s", "key_shared")
            with pytest.raises(ConsumerBusy):
                await here.subscribe("ksm", "s", "failover")
            await keyed.close()
            await (await here.subscribe("ksm", "s", "exclusive")).close()


@pytest.mark.slow
async def test_keys_held_by_a_killed_gateways_consumer_move_on_in_order(gateway, redis_url, gateway_process):
    gateway_process.redis_url, gateway_process.args = redis_url, ["--lease-ms", "1500", "--node-id", "7"]
    await asyncio.to_thread(gateway_process.start)
    await gateway.services.log.create_topic("ksk", 1)
    history, stop = History(), asyncio.Event()
    async with (await Client.connect(native_url(gateway)) as here,
                await Client.connect(gateway_process.native_url, reconnect=False) as there):
        b = await there.subscribe("ksk", "s", "key_shared", "earliest", consumer_name="b", receiver_queue_size=5)
        a = await here.subscribe("ksk", "s", "key_shared", "earliest", consumer_name="a")
        await produce(here, "ksk", 20, 5)
        held = [await b.receive(10) for _ in range(3)]  # received, never acknowledged: b's gateway dies
        loop = asyncio.create_task(consume("a", a, history, stop))
        keys_b = {m.key.decode() for m in held}
        await asyncio.to_thread(gateway_process.kill)
        killed_at = len(history.events)
        await asyncio.wait_for(until(history, 100), 60)  # b's keys, from its first unacked message on
        stop.set()
        await loop
    history.check(20, 5)
    assert not keys_b & {e[2] for e in history.events[:killed_at]}  # not while b held them


async def test_a_negatively_acknowledged_or_timed_out_message_comes_back_to_its_keys_consumer(client):
    a = await client.subscribe("ksn", "s", "key_shared", "earliest", consumer_name="a", negative_ack_delay=0,
                               ack_timeout=0.5)
    b = await client.subscribe("ksn", "s", "key_shared", "earliest", consumer_name="b")
    await produce(client, "ksn", 10, 1)
    m = await a.receive(5)
    await a.negative_acknowledge(m)

    async def back_at_a(count: int) -> None:
        """Acknowledge a's other messages until `m` comes back, `count` times delivered again."""
        while (got := await a.receive(5)).value != m.value:
            await a.acknowledge(got)
        assert got.redelivery_count == count

    await back_at_a(1)
    await back_at_a(2)  # left unacknowledged past a's ack timeout
    await a.acknowledge(m)
    at_b = []
    with pytest.raises(Timeout):  # b's keys, then nothing: a bounded wait is the only way to see an absence
        while True:
            at_b.append((await b.receive(0.5)).value)
    assert m.value not in at_b and len(at_b) < 10
