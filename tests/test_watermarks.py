"""Broker watermarks through the native client: producers assert event time (W_SET), leave the set
(W_IDLE), and `client.watermark` reads the minimum at any offsets, read-committed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.client import ExpiredTransactionError, InvalidRequest, PartitionNotFound, TopicNotFound

REDIS_BACKENDS = ("single", "cluster")
END = 1 << 50  # past any high watermark: the watermark at the end of the committed log


async def topic(gateway, name: str, partitions: int = 2) -> str:
    await gateway.services.log.create_topic(name, partitions)
    return name


def everywhere(partitions: int, offset: int = END) -> dict[int, int]:
    return dict.fromkeys(range(partitions), offset)


async def test_the_watermark_is_the_minimum_over_producers(gateway, client):
    t = await topic(gateway, "wm-min")
    a = await client.create_producer(t, "a")
    b = await client.create_producer(t, "b")
    assert await client.watermark(t, everywhere(2)) is None  # nobody in the set yet

    await a.send(b"a1", event_time=900, partition=0)
    at_a = await a.send_watermark(1000)
    assert len(at_a) == 2 and at_a[0] == 1  # after the message a sent before
    assert await client.watermark(t, everywhere(2)) == 1000
    at_b = await b.send_watermark(datetime.fromtimestamp(0.5, UTC))
    assert await client.watermark(t, everywhere(2)) == 500
    await b.send_watermark(2000)
    assert await client.watermark(t, everywhere(2)) == 1000

    # at earlier offsets the set is what it was there
    assert await client.watermark(t, {p: o + 1 for p, o in enumerate(at_a)}) == 1000
    assert await client.watermark(t, {p: o + 1 for p, o in enumerate(at_b)}) == 500
    assert await client.watermark(t, {0: at_a[0]}) is None  # the marker itself is not below it
    assert await client.watermark(t, {0: at_b[0] + 1, 1: END}) == 500  # the minimum over partitions


async def test_an_idle_producer_leaves_the_set_until_its_next_watermark(gateway, client):
    t = await topic(gateway, "wm-idle", 1)
    a = await client.create_producer(t, "a")
    b = await client.create_producer(t, "b")
    await a.send_watermark(1000)
    await b.send_watermark(500)
    assert await client.watermark(t, {0: END}) == 500
    await b.mark_idle()
    assert await client.watermark(t, {0: END}) == 1000
    await a.mark_idle()
    assert await client.watermark(t, {0: END}) is None
    await b.send_watermark(700)
    assert await client.watermark(t, {0: END}) == 700

    await b.close()  # a closed producer holds nobody back
    assert await client.watermark(t, {0: END}) is None


async def test_a_transactional_watermark_counts_only_after_commit(gateway, client):
    t = await topic(gateway, "wm-txn")
    a = await client.create_producer(t, "a")
    b = await client.create_producer(t, "b")
    await b.send_watermark(1000)

    txn = await client.new_transaction(timeout=30)
    await a.send(b"in the transaction", txn=txn, event_time=300)
    await a.send_watermark(300, txn=txn)
    await b.send_watermark(2000)  # after the transaction's marker: it waits for the commit too
    assert await client.watermark(t, everywhere(2)) == 1000
    await txn.commit()
    assert await client.watermark(t, everywhere(2)) == 300

    aborted = await client.new_transaction(timeout=30)
    await a.send_watermark(100, txn=aborted)
    await a.mark_idle(txn=aborted)
    assert await client.watermark(t, everywhere(2)) == 300
    await aborted.abort()
    assert await client.watermark(t, everywhere(2)) == 300
    with pytest.raises(ExpiredTransactionError):
        await a.send_watermark(50, txn=aborted)
    for p in range(2):  # still so from a snapshot, and with the transaction settled
        assert await gateway.services.watermark.snapshot(t, p)
    assert await client.watermark(t, everywhere(2)) == 300


async def test_bad_watermark_requests_are_refused_and_the_gateway_carries_on(gateway, client):
    t = await topic(gateway, "wm-bad")
    a = await client.create_producer(t, "a")
    with pytest.raises(TopicNotFound):
        await client.watermark("no-such-topic", {0: 1})
    with pytest.raises(PartitionNotFound):
        await client.watermark(t, {5: 1})
    with pytest.raises(InvalidRequest):
        await client.watermark(t, {0: -7})
    assert await client.watermark(t, {}) is None
    await a.send_watermark(42)
    assert await client.watermark(t, everywhere(2)) == 42
