"""Delayed delivery with the native producer: deliver_at / deliver_after, in and out of transactions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gateway.client import Client, Timeout
from gateway.clock import now_ms
from tests.conftest import native_url

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster


@pytest.fixture
async def client(gateway):
    c = await Client.connect(native_url(gateway))
    yield c
    await c.close()


async def test_delivered_in_time_order_at_their_time(client):
    producer = await client.create_producer("d")
    consumer = await client.subscribe("d", "s", initial_position="earliest")
    start = now_ms()
    due = {b"third": start + 900, b"first": start + 300, b"second": start + 600}
    ids = [
        await producer.send(b"third", deliver_at=due[b"third"]),
        await producer.send(b"first", deliver_after=0.3),
        await producer.send(b"second", deliver_after=timedelta(milliseconds=600)),
    ]
    assert [i.offset for i in ids] == [-1, -1, -1]  # held: no offset until delivered
    now = await producer.send(b"now")
    assert now.offset == 0
    assert (await consumer.receive(5)).value == b"now"
    for value in (b"first", b"second", b"third"):
        m = await consumer.receive(5)
        assert m.value == value
        assert now_ms() >= due[value] - 5  # the client's and the gateway's clocks are the same here
        await consumer.acknowledge(m)


async def test_two_subscriptions_each_get_it_once(client):
    producer = await client.create_producer("d2")
    a = await client.subscribe("d2", "a", initial_position="earliest")
    b = await client.subscribe("d2", "b", initial_position="earliest")
    await producer.send(b"later", deliver_after=0.2)
    await producer.send(b"marker", deliver_after=0.5)
    for consumer in (a, b):
        assert [(await consumer.receive(5)).value for _ in range(2)] == [b"later", b"marker"]


async def test_a_time_already_past_is_delivered_at_once(client):
    producer = await client.create_producer("d3")
    consumer = await client.subscribe("d3", "s", initial_position="earliest")
    mid = await producer.send(b"late", deliver_at=datetime.now(UTC) - timedelta(minutes=1))
    assert mid.offset == -1
    assert (await consumer.receive(2)).value == b"late"


async def test_in_a_transaction_scheduled_at_commit_and_dropped_on_abort(client):
    producer = await client.create_producer("d4")
    consumer = await client.subscribe("d4", "s", initial_position="earliest")
    dropped = await client.new_transaction()
    await producer.send(b"aborted", deliver_after=0.05, txn=dropped)
    await dropped.abort()
    kept = await client.new_transaction()
    await producer.send(b"committed", deliver_after=0.05, txn=kept)
    with pytest.raises(Timeout):  # due, but its transaction is open
        await consumer.receive(0.3)
    await kept.commit()
    assert (await consumer.receive(5)).value == b"committed"
    await producer.send(b"after")
    assert (await consumer.receive(5)).value == b"after"  # the aborted one never comes


async def test_flush_waits_for_sends_outside_the_batching(client):
    producer = await client.create_producer("d5")
    consumer = await client.subscribe("d5", "s", initial_position="earliest")
    pending = producer.send_async(b"soon", deliver_after=0.05)
    await producer.flush()
    assert pending.done() and pending.result().offset == -1
    assert (await consumer.receive(5)).value == b"soon"
