"""A subscription's watermark as its consumers receive it: at the acknowledged position, in order
with the messages, right after a failover or a seek, and on another gateway."""

from __future__ import annotations

from gateway.client import Client, MessageId
from gateway.server.gateway import Gateway
from tests.conftest import eventually, native_url, run_example, test_config


async def one_partition(gateway, name: str) -> str:
    await gateway.services.log.create_topic(name, 1)
    return name


async def test_a_consumer_that_attaches_gets_the_current_watermark_at_once(gateway, client):
    t = await one_partition(gateway, "wmc-attach")
    a = await client.create_producer(t, "a")
    await a.send_watermark(1000)
    late_joiner = await client.subscribe(t, "s", mode="shared", initial_position="latest")
    assert late_joiner.last_watermark == 1000
    second = await client.subscribe(t, "s", mode="shared")
    assert second.last_watermark == 1000

    # from the start of the log, the marker has to be passed first: it is, once dispatched
    seen: list[int | None] = []
    reader = await client.subscribe(t, "from-start", initial_position="earliest", on_watermark=seen.append)
    await eventually(lambda: reader.last_watermark == 1000)
    assert seen == [1000]


async def test_the_watermark_waits_for_unacknowledged_messages(gateway, client):
    t = await one_partition(gateway, "wmc-ack")
    a = await client.create_producer(t, "a", batching=False)
    await a.send(b"m1", event_time=100)
    await a.send_watermark(1000)
    await a.send(b"m2", event_time=1200)
    await a.send_watermark(2000)
    consumer = await client.subscribe(t, "s", mode="shared", initial_position="earliest")
    changes = consumer.watermarks()
    assert await anext(changes) is None
    m1, m2 = await consumer.receive(5), await consumer.receive(5)
    assert (m1.value, m2.value) == (b"m1", b"m2") and not m1.late and not m2.late
    await consumer.acknowledge(m2)
    assert consumer.last_watermark is None  # m1 is not acknowledged: nothing after it counts yet
    assert await client.watermark(t, {0: m1.offset}) is None
    await consumer.acknowledge(m1)  # an update is sent before the ack's answer
    assert consumer.last_watermark == 2000
    assert await anext(changes) == 2000
    await consumer.close()
    assert [w async for w in changes] == []


async def test_watermarks_come_in_order_with_messages_and_late_ones_are_marked(gateway, client):
    t = await one_partition(gateway, "wmc-order")
    a = await client.create_producer(t, "a", batching=False)
    b = await client.create_producer(t, "b", batching=False)
    seen: list[int | None] = []
    consumer = await client.subscribe(t, "s", initial_position="earliest", on_watermark=seen.append)
    await a.send_watermark(1000)
    await eventually(lambda: consumer.last_watermark == 1000)

    await b.send(b"late", event_time=500)  # b is not in the set: nothing stopped it
    await a.send(b"on time", event_time=1500)
    late, on_time = await consumer.receive(5), await consumer.receive(5)
    assert (late.value, late.late) == (b"late", True)
    assert (on_time.value, on_time.late) == (b"on time", False)

    await a.send_watermark(3000)
    await b.send(b"not judged yet", event_time=2000)
    held = await consumer.receive(5)
    assert not held.late and consumer.last_watermark == 1000  # the earlier ones are not acknowledged
    await consumer.acknowledge_cumulative(on_time)
    assert consumer.last_watermark == 3000
    await b.send(b"late again", event_time=2500)
    assert (await consumer.receive(5)).late
    assert seen == [1000, 3000]


async def test_a_change_waits_behind_the_messages_sent_before_it(gateway, client):
    t = await one_partition(gateway, "wmc-queue")
    a = await client.create_producer(t, "a", batching=False)
    for v in (b"m0", b"m1"):
        await a.send(v, event_time=10)
    await a.send_watermark(1000)
    await a.send(b"m2", event_time=2000)
    consumer = await client.subscribe(t, "s", initial_position="earliest")
    first = await consumer.receive(5)  # m1 and m2 came in the same push, and wait in the queue
    # m1 acknowledged too, while queued: it is not handed out after its acknowledgement came back
    await consumer.acknowledge_cumulative(MessageId(t, 0, first.offset + 1))
    assert consumer.last_watermark is None  # the change came behind m1 and m2
    assert (await consumer.receive(5)).value == b"m2"
    assert consumer.last_watermark == 1000


async def test_after_a_failover_the_watermark_is_the_acknowledged_positions(gateway, client, redis_url):
    t = await one_partition(gateway, "wmc-failover")
    a = await client.create_producer(t, "a", batching=False)
    await a.send_watermark(1000)
    await a.send(b"m1", event_time=1100)
    await a.send_watermark(2000)
    await a.send(b"m2", event_time=2100)
    first = await client.subscribe(t, "s", mode="failover", initial_position="earliest")
    standby = await client.subscribe(t, "s", mode="failover")
    got = [await first.receive(5), await first.receive(5)]
    assert [m.value for m in got] == [b"m1", b"m2"]
    assert first.last_watermark == 1000  # m1 is not acknowledged: a's 2000 does not count yet
    await first.close()

    again = [await standby.receive(5), await standby.receive(5)]
    assert [m.value for m in again] == [b"m1", b"m2"]
    assert standby.last_watermark == 1000 and not any(m.late for m in again)
    await standby.acknowledge(again[0])
    assert standby.last_watermark == 2000
    await standby.close()

    # another gateway takes the subscription over from what Redis holds
    other = Gateway(test_config(redis_url, node_id=7))
    await other.start()
    try:
        async with await Client.connect(native_url(other)) as elsewhere:
            taker = await elsewhere.subscribe(t, "s", mode="failover")
            assert taker.last_watermark == 2000
            assert (await taker.receive(5)).value == b"m2"
    finally:
        await other.stop()


async def test_a_seek_moves_the_watermark_with_the_position(gateway, client):
    t = await one_partition(gateway, "wmc-seek")
    a = await client.create_producer(t, "a", batching=False)
    await a.send(b"m0", event_time=500)
    await a.send_watermark(1000)
    m1 = await a.send(b"m1", event_time=1500)
    await a.send_watermark(2000)
    await a.send(b"m2", event_time=2500)
    consumer = await client.subscribe(t, "s", initial_position="earliest")
    for _ in range(3):
        await consumer.acknowledge(await consumer.receive(5))
    assert consumer.last_watermark == 2000
    await consumer.seek("earliest")
    await eventually(lambda: consumer.last_watermark is None)
    assert (await consumer.receive(5)).value == b"m0"
    await consumer.seek(m1)
    await eventually(lambda: consumer.last_watermark == 1000)
    again = await consumer.receive(5)
    assert again.value == b"m1" and not again.late
    await consumer.acknowledge(again)
    assert consumer.last_watermark == 1000  # the change waits behind m2, prefetched already
    last = await consumer.receive(5)
    assert last.value == b"m2" and not last.late and consumer.last_watermark == 2000


async def test_the_event_time_windows_example(gateway):
    code, text = await run_example("native_watermarks.py", gateway)
    assert code == 0, text
    assert text.splitlines() == [
        "window [0s, 10s): 4 readings, sum 10",
        "late: reading 100 at 3s",
        "window [10s, 20s): 1 readings, sum 5",
        "watermark: 20s",
    ]
