"""The native client against an in-process gateway: produce, consume, keys, headers, event time."""

from __future__ import annotations

import asyncio

import pytest

from gateway.client import Client, Message, MessageId, Timeout, TopicNotFound
from gateway.formats.partitioner import partition_for_key
from gateway.formats.records import BatchBuilder
from gateway.pb import gateway_pb2 as pb
from gateway.server.gateway import Gateway
from gateway.store.embedded import free_port
from tests.conftest import native_url, run_example, test_config


@pytest.fixture
async def client(gateway):
    c = await Client.connect(native_url(gateway))
    yield c
    await c.close()


async def drain(consumer, n: int) -> list:
    return [await consumer.receive(5) for _ in range(n)]


async def test_round_trip_with_keys_headers_and_event_time(client):
    producer = await client.create_producer("rt")
    consumer = await client.subscribe("rt", "s", initial_position="earliest")
    ids = await asyncio.gather(
        producer.send(b"v1", key=b"k1", headers={"h": b"x"}, event_time=1234),
        producer.send("v2"),
    )
    assert ids == [MessageId("rt", 0, 0), MessageId("rt", 0, 1)]
    m1, m2 = await drain(consumer, 2)
    assert (m1.value, m1.key, m1.headers, m1.event_time) == (b"v1", b"k1", {"h": b"x"}, 1234)
    assert (m2.value, m2.key, m2.event_time) == (b"v2", None, None)
    assert m1.message_id == ids[0] and m1.topic == "rt" and m1.publish_time > 0
    await consumer.acknowledge(m1)
    await consumer.acknowledge(m2)
    with pytest.raises(Timeout):
        await consumer.receive(0.05)


async def test_event_time_is_a_record_header_both_faces_see(gateway, client):
    producer = await client.create_producer("evt")
    mid = await producer.send(b"v", event_time=1_700_000_000_000)
    sl = await gateway.services.log.read("evt", 0, mid.offset)
    from gateway.formats.records import iter_records

    (rec,) = list(iter_records(sl.entries[0].batch, sl.entries[0].base_offset))
    assert rec.headers == [("x-event-time", b"1700000000000")]


async def test_keys_land_on_their_murmur2_partition_and_one_consumer_reads_all(gateway, client):
    await gateway.services.log.create_topic("keyed", 4)
    consumer = await client.subscribe("keyed", "s", initial_position="earliest")
    async with await client.create_producer("keyed", compression="zstd") as producer:
        keys = [f"key-{i}".encode() for i in range(40)]
        ids = await asyncio.gather(*(producer.send(k, key=k) for k in keys))
    assert {mid.partition for mid in ids} == {0, 1, 2, 3}
    for k, mid in zip(keys, ids, strict=True):
        assert mid.partition == partition_for_key(k, 4)
    got = await drain(consumer, 40)
    assert sorted(m.value for m in got) == sorted(keys)
    assert all(m.partition == partition_for_key(m.key, 4) for m in got)
    assert {m.message_id for m in got} == set(ids)


async def test_null_keys_spread_over_partitions(gateway, client):
    await gateway.services.log.create_topic("spread", 3)
    producer = await client.create_producer("spread", batching=False)
    ids = [await producer.send(b"x") for _ in range(6)]
    assert {mid.partition for mid in ids} == {0, 1, 2}


async def test_unknown_topic_without_auto_create(gateway, client):
    gateway.services.log.auto_create = False
    with pytest.raises(TopicNotFound):
        await client.create_producer("missing")
    with pytest.raises(TopicNotFound):
        await client.subscribe("missing", "s")


async def test_resent_batch_is_stored_once(gateway, client):
    producer = await client.create_producer("idem")
    b = BatchBuilder(producer_id=producer.producer_id, producer_epoch=0, base_sequence=0)
    b.append(b"once")
    send = pb.Send(handle=producer._handle, partition=0, batch=b.build())
    first = await client._conn.request(pb.Request(send=send))
    again = await client._conn.request(pb.Request(send=send))
    assert (first.send_receipt.base_offset, first.send_receipt.duplicate) == (0, False)
    assert (again.send_receipt.base_offset, again.send_receipt.duplicate) == (0, True)
    # the producer's own sequence carries on after the batch it sent by hand
    producer._sequences[0] = 1
    assert (await producer.send(b"next")).offset == 1
    # on another connection, a producer resuming the id still recognises the batch (a reconnect)
    async with await Client.connect(native_url(gateway)) as other:
        resumed = await other.request(pb.Request(create_producer=pb.CreateProducer(
            topic="idem", resume_producer_id=producer.producer_id)))
        send.handle = resumed.producer_created.handle
        replay = await other.request(pb.Request(send=send))
        assert (replay.send_receipt.base_offset, replay.send_receipt.duplicate) == (0, True)


async def test_linger_fills_one_batch(gateway, client):
    producer = await client.create_producer("linger", linger_ms=50)
    await asyncio.gather(*(producer.send(b"%d" % i) for i in range(20)))
    sl = await gateway.services.log.read("linger", 0, 0)
    assert [e.count for e in sl.entries] == [20]


async def test_example_runs_against_the_gateway(gateway):
    code, text = await run_example("native_produce_consume.py", gateway)
    assert code == 0, text
    assert "consumed 10 messages" in text, text


class Restarting:
    """An in-process gateway on a native port that stays the same across restarts, so a connected
    client reconnects to the next one."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url, self.port = redis_url, free_port()
        self.url = f"gateway://127.0.0.1:{self.port}"
        self.gw: Gateway | None = None

    async def start(self) -> None:
        self.gw = Gateway(test_config(self.redis_url, native_port=self.port))
        await self.gw.start()

    async def restart(self) -> None:
        assert self.gw is not None
        await self.gw.stop()
        await self.start()


@pytest.fixture
async def restarting(redis_url):
    r = Restarting(redis_url)
    await r.start()
    yield r
    assert r.gw is not None
    await r.gw.stop()


async def test_client_reconnects_after_a_gateway_restart(restarting):
    async with await Client.connect(restarting.url) as client:
        producer = await client.create_producer("re", batching=False)
        consumer = await client.subscribe("re", "s", "shared", "earliest")
        await producer.send(b"before")
        first = await consumer.receive(5)
        await restarting.restart()  # first is never acked: it comes again
        after = await producer.send(b"after")  # waits for the reconnection
        assert after.offset == 1
        again = [await consumer.receive(5) for _ in range(2)]
        assert [(m.offset, m.value) for m in again] == [(0, b"before"), (1, b"after")]
        assert again[0].message_id == first.message_id
        for m in again:
            await consumer.acknowledge(m)


async def test_a_nack_of_a_message_from_before_a_reconnect_is_dropped(restarting):
    """A message received before the consumer reconnected comes again anyway: nacking it (say, after
    a step on it failed with the connection) must not take that new delivery away, as Pulsar's
    consumer epoch (PIP-84) drops stale redelivery requests."""
    async with await Client.connect(restarting.url) as client:
        producer = await client.create_producer("re", batching=False)
        consumer = await client.subscribe("re", "s", "shared", "earliest", negative_ack_delay=0)
        await producer.send(b"before")
        first = await consumer.receive(5)
        await restarting.restart()
        again = await consumer.receive(5)
        await consumer.negative_acknowledge(first)  # stale: dropped
        await producer.send(b"after")
        after = await consumer.receive(5)  # not the nacked one again first
        assert [(m.offset, m.value) for m in (again, after)] == [(0, b"before"), (1, b"after")]
        await consumer.negative_acknowledge(again)  # a nack of the new delivery still counts
        assert (await consumer.receive(5)).message_id == again.message_id


async def test_a_message_acked_after_a_reconnect_is_not_handed_out_again(restarting):
    """Received, then the gateway restarts: subscribed again, the consumer is sent the message again
    before its acknowledgement (held back by the reconnection) reaches the gateway. Once that
    acknowledgement is answered, the copy waiting in the receive queue must not come out (soak
    sentinel:277937572: acked-redelivered)."""
    async def queued(n: int) -> None:
        while sum(isinstance(m, Message) for m in consumer._queue) < n:
            consumer._arrived.clear()
            await consumer._arrived.wait()

    async with await Client.connect(restarting.url) as client:
        producer = await client.create_producer("reack", batching=False)
        consumer = await client.subscribe("reack", "s", "exclusive", "earliest")
        await producer.send(b"before")
        first = await consumer.receive(5)
        await restarting.restart()
        await producer.send(b"after")  # waits for the reconnection
        await asyncio.wait_for(queued(2), 5)  # "before" again, then "after", neither taken
        await consumer.acknowledge(first)
        nxt = await consumer.receive(5)
        assert (nxt.offset, nxt.value) == (1, b"after")
        await consumer.acknowledge(nxt)


@pytest.mark.parametrize(("mode", "store", "look"), [("exclusive", "store", "standing"),
                                                     ("key_shared", "key_shared", "claim")])
async def test_a_message_acked_while_a_dispatch_pass_reads_it_is_not_sent(gateway, monkeypatch, mode, store, look):
    """The dispatcher reads a message again from the cursor for a consumer that subscribed again, and
    the consumer acknowledges what it received before while that pass is between its last look at
    the acks (`look`) and sending: the ack is answered OK, so the pass must not send the message after it."""
    url = native_url(gateway)
    async with await Client.connect(url) as before:
        await (await before.create_producer("race", batching=False)).send(b"m")
        first = await (await before.subscribe("race", "s", mode, "earliest")).receive(5)
    # gone without acking it: the next consumer is sent it again, once the pass below goes on
    sub_store = getattr(gateway.services.subscriptions, store)
    looked, go_on = asyncio.Event(), asyncio.Event()
    real = getattr(sub_store, look)

    async def held(*args: object) -> object:
        out = await real(*args)
        if not looked.is_set():  # the pass's last look at the acks, before it sends
            looked.set()
            await go_on.wait()
        return out

    monkeypatch.setattr(sub_store, look, held)
    async with await Client.connect(url) as client:
        consumer = await client.subscribe("race", "s", mode, "earliest")
        await asyncio.wait_for(looked.wait(), 5)
        await consumer.acknowledge(first.message_id)
        go_on.set()
        await (await client.create_producer("race", batching=False)).send(b"after")
        nxt = await consumer.receive(5)
        assert (nxt.offset, nxt.value) == (1, b"after")
