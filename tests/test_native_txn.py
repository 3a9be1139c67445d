"""Native transactions (PIP-31): consume-transform-produce exactly once, PENDING_ACK conflicts,
timeouts, and what readers of the output see."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from gateway.client import (
    Client,
    ConcurrentTransactions,
    ExpiredTransactionError,
    InvalidConfig,
    Timeout,
    TransactionConflict,
)
from gateway.server.gateway import Gateway
from gateway.store import keys
from tests.conftest import native_url, run_example, test_config

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster

N = 10


async def produce_inputs(client: Client, topic: str, n: int = N) -> None:
    producer = await client.create_producer(topic)
    await asyncio.gather(*(producer.send(f"in-{i}".encode()) for i in range(n)))
    await producer.close()


async def read_all(client: Client, topic: str) -> list[bytes]:
    """Every message of `topic` a fresh subscription sees, up to a sentinel sent to each partition
    after everything else."""
    producer = await client.create_producer(topic)
    for p in range(producer.partitions):
        await producer.send(b"END", partition=p)
    reader = await client.subscribe(topic, f"check-{id(producer)}", initial_position="earliest")
    out = []
    ends = 0
    while ends < producer.partitions:
        m = await reader.receive(10)
        if m.value == b"END":
            ends += 1
        else:
            out.append(m.value)
    await reader.close()
    await producer.close()
    return out


@pytest.fixture
async def client(gateway):
    c = await Client.connect(native_url(gateway))
    yield c
    await c.close()


@pytest.mark.parametrize("cumulative", [False, True], ids=["individual", "cumulative"])
async def test_consume_transform_produce_exactly_once(client, cumulative):
    await produce_inputs(client, "in")
    mode = "failover" if cumulative else "shared"
    consumer = await client.subscribe("in", "proc", mode=mode, initial_position="earliest")
    producer = await client.create_producer("out")
    watcher = await client.subscribe("out", "watch", initial_position="earliest")

    async def run(count: int, commit: bool) -> list[bytes]:
        txn = await client.new_transaction(timeout=30)
        got = [await consumer.receive(10) for _ in range(count)]
        for m in got:
            ids = await producer.send(m.value.replace(b"in", b"out"), txn=txn)
            assert ids.offset >= 0
            if not cumulative:
                await consumer.acknowledge(m, txn=txn)
        if cumulative:
            await consumer.acknowledge_cumulative(max(got, key=lambda m: m.offset), txn=txn)
        with pytest.raises(Timeout):  # nothing of an open transaction is visible
            await watcher.receive(0.2)
        await (txn.commit() if commit else txn.abort())
        return [m.value for m in got]

    first = await run(4, commit=False)
    # the aborted run's inputs come again, with everything else
    second = await run(N, commit=True)
    assert sorted(second) == sorted(f"in-{i}".encode() for i in range(N))
    assert set(first) <= set(second)
    out = await read_all(client, "out")
    assert sorted(out) == sorted(f"out-{i}".encode() for i in range(N))
    # the acks were committed: the subscription has nothing left
    await consumer.close()
    again = await client.subscribe("in", "proc", mode=mode)
    await produce_inputs(client, "in", 1)
    assert (await again.receive(10)).offset == N  # the new one, nothing from before


async def test_two_transactions_racing_for_one_message(client):
    await produce_inputs(client, "in", 2)
    consumer = await client.subscribe("in", "proc", mode="shared", initial_position="earliest")
    m0, m1 = await consumer.receive(10), await consumer.receive(10)
    t1, t2 = await client.new_transaction(), await client.new_transaction()
    results = await asyncio.gather(consumer.acknowledge(m0, txn=t1), consumer.acknowledge(m0, txn=t2),
                                   return_exceptions=True)
    assert sum(r is None for r in results) == 1
    (conflict,) = [r for r in results if r is not None]
    assert isinstance(conflict, TransactionConflict)
    winner, loser = (t1, t2) if results[0] is None else (t2, t1)
    with pytest.raises(TransactionConflict):  # a plain ack of a locked message conflicts too
        await consumer.acknowledge(m0)
    with pytest.raises(TransactionConflict):  # the failed step fails the commit, which aborts
        await loser.commit()
    assert loser.state == "ABORTED"
    await consumer.acknowledge(m1)
    await winner.commit()
    late = await client.new_transaction()
    with pytest.raises(TransactionConflict):  # acked already: a duplicate of work done
        await consumer.acknowledge(m0, txn=late)
    await late.abort()
    with pytest.raises(ExpiredTransactionError):
        await winner.commit()


@pytest.mark.parametrize("commit", [False, True], ids=["aborted", "committed"])
async def test_a_message_a_transaction_holds_goes_to_no_one_until_it_ends(client, commit):
    """PIP-31's PENDING_ACK: the consumer holding a message leaves while a transaction has acked it;
    no other consumer gets it meanwhile (it could not acknowledge it), as Pulsar's dispatcher leaves
    pending-ack positions out. The abort delivers it again; after the commit it is acked."""
    await produce_inputs(client, "in", 1)
    leaving = await client.subscribe("in", "proc", mode="shared", initial_position="earliest")
    m = await leaving.receive(10)
    txn = await client.new_transaction()
    await leaving.acknowledge(m, txn=txn)
    await leaving.close()
    staying = await client.subscribe("in", "proc", mode="shared")
    await produce_inputs(client, "in", 1)
    after = await staying.receive(10)
    assert after.offset == 1  # the held message is not delivered ahead of it
    await staying.acknowledge(after)
    await (txn.commit() if commit else txn.abort())
    if not commit:
        again = await staying.receive(10)
        assert (again.offset, again.redelivery_count) == (0, 1)
        await staying.acknowledge(again)
    await produce_inputs(client, "in", 1)
    assert (await staying.receive(10)).offset == 2  # nothing of before comes again


@pytest.fixture
async def quick_reaper(redis_url):
    gw = Gateway(test_config(redis_url, txn_reaper_interval=0.05, txn_max_timeout_ms=60_000))
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


async def test_timeout_aborts_and_releases_acks(quick_reaper):
    async with await Client.connect(native_url(quick_reaper)) as client:
        with pytest.raises(InvalidConfig, match="maximum"):
            await client.new_transaction(timeout=timedelta(minutes=5))
        await produce_inputs(client, "in", 1)
        consumer = await client.subscribe("in", "proc", mode="shared", initial_position="earliest")
        producer = await client.create_producer("out")
        m = await consumer.receive(10)
        txn = await client.new_transaction(timeout=timedelta(milliseconds=300))
        await producer.send(b"never", txn=txn)
        await consumer.acknowledge(m, txn=txn)
        again = await consumer.receive(10)  # the reaper's abort released it
        assert again.offset == m.offset and again.redelivery_count == 1
        for step in (producer.send(b"late", txn=txn), consumer.acknowledge(again, txn=txn), txn.commit()):
            with pytest.raises(ExpiredTransactionError):
                await step
        await consumer.acknowledge(again)
        assert await read_all(client, "out") == []


async def test_messages_of_a_transaction_are_atomic_across_partitions(client, gateway):
    await gateway.services.log.create_topic("multi", 3)
    producer = await client.create_producer("multi")
    reader = await client.subscribe("multi", "r", initial_position="earliest")
    plain = await producer.send(b"plain", partition=0)
    txn = await client.new_transaction()
    ids = await asyncio.gather(*(producer.send(f"t{p}", partition=p, txn=txn) for p in range(3)))
    assert [i.partition for i in ids] == [0, 1, 2]
    assert (await reader.receive(10)).message_id == plain
    with pytest.raises(Timeout):
        await reader.receive(0.2)
    await txn.commit()
    got = sorted([(await reader.receive(10)).value for _ in range(3)])
    assert got == [b"t0", b"t1", b"t2"]


async def test_one_transaction_at_a_time_per_key(gateway):
    async with await Client.connect(native_url(gateway), transaction_key="solo") as client:
        txn = await client.new_transaction()
        with pytest.raises(ConcurrentTransactions):
            await client.new_transaction()
        await txn.commit()
        await (await client.new_transaction()).abort()


async def test_transactions_example_transforms_each_input_once(gateway):
    await gateway.services.log.create_topic("words", 2)
    await gateway.services.log.create_topic("shouts", 2)
    code, text = await run_example("native_transactions.py", gateway)
    assert code == 0, text
    assert "done: transformed 30" in text, text
    async with await Client.connect(native_url(gateway)) as client:
        out = await read_all(client, "shouts")
    assert sorted(out) == sorted(f"WORD {i}".encode() for i in range(30))


async def held_by_an_unsettled_lock(gateway, client, commit: bool):
    """A consumer of "in" and the message it holds, acked in a transaction that then ended with its
    lock left unsettled, as in a race with its end."""
    await produce_inputs(client, "in", 1)
    consumer = await client.subscribe("in", "proc", mode="shared", initial_position="earliest")
    m = await consumer.receive(10)
    stale = await client.new_transaction()
    await consumer.acknowledge(m, txn=stale)
    settlers = gateway.services.txn.settlers
    saved = list(settlers)
    settlers.clear()
    try:
        await (stale.commit() if commit else stale.abort())
    finally:
        settlers[:] = saved
    return consumer, m


@pytest.mark.parametrize("commit", [False, True], ids=["aborted", "committed"])
async def test_a_lock_left_by_an_ended_transaction_heals(gateway, client, commit):
    """A lock taken in a race with its transaction's end (so never settled) gives way once the
    transaction is seen to have ended."""
    consumer, m = await held_by_an_unsettled_lock(gateway, client, commit)
    txn = await client.new_transaction()
    if commit:
        with pytest.raises(TransactionConflict):  # healed into an ack: acked already
            await consumer.acknowledge(m, txn=txn)
        await txn.abort()
    else:
        await consumer.acknowledge(m, txn=txn)
        await txn.commit()
    await produce_inputs(client, "in", 1)
    assert (await consumer.receive(10)).offset == 1  # acked once, never delivered again


async def test_a_held_message_whose_transaction_ended_unsettled_comes_again(gateway, client):
    """A lock whose transaction's end missed it, on a message no consumer holds any more: held back
    as any locked message, then healed (the transaction is seen to have aborted) and delivered."""
    leaving, m = await held_by_an_unsettled_lock(gateway, client, False)
    await leaving.close()
    staying = await client.subscribe("in", "proc", mode="shared")
    again = await staying.receive(10)
    assert again.offset == m.offset
    await staying.acknowledge(again)


async def test_transactional_records_are_batched_apart_from_the_others(gateway, client):
    producer = await client.create_producer("batched", linger_ms=20)
    txn = await client.new_transaction()
    held = [producer.send_async(f"t{i}", txn=txn, partition=0) for i in range(100)]
    plain = await producer.send(b"plain", partition=0)  # not held back by the transaction
    await txn.commit()
    ids = [f.result() for f in held]
    assert [i.offset for i in ids] == list(range(ids[0].offset, ids[0].offset + 100))
    assert plain.offset not in range(ids[0].offset, ids[0].offset + 100)
    sl = await gateway.services.log.read("batched", 0, 0, 1000)
    assert len(sl.entries) <= 5  # a handful of batches (plain, transactional, marker), not 100
    assert sorted(await read_all(client, "batched")) == sorted([b"plain", *(f"t{i}".encode() for i in range(100))])


async def test_a_transaction_that_is_its_own_producer_leaves_nothing_on_its_partitions(client, gateway, raw_redis):
    """A native transaction is a producer id of its own (PIP-31): once it ends, nothing of it stays
    in its partitions' keys, where a producer id that many transactions share keeps the last one's
    end (txn-marker-6), which would otherwise grow by one entry a transaction."""
    await gateway.services.log.create_topic("own-producer", 2)
    producer = await client.create_producer("own-producer")
    for commit in (True, False, True):
        txn = await client.new_transaction()
        await asyncio.gather(*(producer.send(b"v", partition=p, txn=txn) for p in range(2)))
        await (txn.commit() if commit else txn.abort())
    for p in range(2):
        assert await raw_redis.hgetall(keys.expected_txns("own-producer", p)) == {}
        assert await raw_redis.hgetall(keys.open_txns("own-producer", p)) == {}
