"""Range reads on the native face: partition offsets and READ_COMMITTED reads of [start, end) that
keep no position on the gateway (what the Spark source is built on)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.client import Client, OffsetOutOfRange, PartitionInfo, TopicNotFound


async def send_batches(client: Client, topic: str, batches: list[list[bytes]], partition: int = 0) -> None:
    """Each inner list as one stored batch."""
    producer = await client.create_producer(topic, batch_max_messages=10_000, linger_ms=1000)
    for values in batches:
        futures = [producer.send_async(v, partition=partition) for v in values]
        await producer.flush()
        await asyncio.gather(*futures)
    await producer.close()


async def values(client: Client, topic: str, start: int, end: int = -1, **kw) -> list[tuple[int, bytes]]:
    return [(m.offset, m.value) async for m in client.read_range(topic, 0, start, end, **kw)]


async def test_partition_offsets_with_an_open_transaction(gateway, client):
    await gateway.services.log.create_topic("po", 2)
    await send_batches(client, "po", [[b"a", b"b", b"c"]], partition=1)
    assert await client.list_partitions("po") == [PartitionInfo(0, 0, 0, 0), PartitionInfo(1, 0, 3, 3)]
    producer = await client.create_producer("po")
    txn = await client.new_transaction(timeout=30)
    await producer.send(b"t", partition=1, txn=txn)
    await txn.flush()
    await send_batches(client, "po", [[b"d"]], partition=1)
    # the open transaction holds the last stable offset at its first record
    assert (await client.list_partitions("po"))[1] == PartitionInfo(1, 0, 5, 3)
    await txn.commit()
    assert (await client.list_partitions("po"))[1] == PartitionInfo(1, 0, 6, 6)  # + the commit marker
    with pytest.raises(TopicNotFound):
        await client.list_partitions("no-such-topic")


async def test_a_range_cuts_batches_at_both_ends_and_reads_the_same_twice(client):
    await send_batches(client, "cut", [[b"0", b"1", b"2"], [b"3", b"4", b"5"], [b"6", b"7"]])
    got = await values(client, "cut", 2, 7)
    assert got == [(i, str(i).encode()) for i in range(2, 7)]
    assert await values(client, "cut", 2, 7) == got
    assert await values(client, "cut", 0) == [(i, str(i).encode()) for i in range(8)]
    assert await values(client, "cut", 8) == []  # at the end: nothing, no error
    batches = [b async for b in client.read_batches("cut", 0, 2, 7)]
    assert [b.base_offset for b in batches] == [0, 3, 6]  # whole stored batches; decoding is the reader's


async def test_small_reads_page_through_a_long_range(client):
    await send_batches(client, "pages", [[b"x" * 1000] * 5 for _ in range(20)])
    got = await values(client, "pages", 0, 100, max_bytes=1)  # one batch per request
    assert [o for o, _ in got] == list(range(100))


async def test_aborted_records_and_markers_are_left_out_and_open_ones_not_reached(client):
    producer = await client.create_producer("rc")
    await producer.send(b"before")
    aborted = await client.new_transaction(timeout=30)
    await producer.send(b"aborted-1", txn=aborted)
    await producer.send(b"aborted-2", txn=aborted)
    await aborted.abort()
    committed = await client.new_transaction(timeout=30)
    await producer.send(b"committed", txn=committed)
    await committed.commit()
    await producer.send(b"plain")
    still_open = await client.new_transaction(timeout=30)
    await producer.send(b"open", txn=still_open)
    await still_open.flush()
    await producer.send(b"after-open")
    info = (await client.list_partitions("rc"))[0]
    assert (info.last_stable_offset, info.high_watermark) == (7, 9)
    assert [v for _, v in await values(client, "rc", 0)] == [b"before", b"committed", b"plain"]
    with pytest.raises(OffsetOutOfRange, match="last stable offset"):
        await values(client, "rc", 0, 9)
    await still_open.commit()
    assert [v for _, v in await values(client, "rc", 6)] == [b"plain", b"open", b"after-open"]


async def test_a_range_below_the_log_start_is_out_of_range(gateway, client):
    await send_batches(client, "trimmed", [[b"a", b"b"], [b"c", b"d"]])
    await gateway.services.log.delete_records("trimmed", 0, 2)
    with pytest.raises(OffsetOutOfRange):
        await values(client, "trimmed", 0, 4)
    assert [v for _, v in await values(client, "trimmed", 2, 4)] == [b"c", b"d"]
    with pytest.raises(OffsetOutOfRange):
        await values(client, "trimmed", 9, 12)  # past the high watermark
