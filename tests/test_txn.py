"""The transaction coordinator on a real Redis: markers, last stable offset, aborted ranges,
repeatable steps, timeouts and roll-forward after a coordinator dies between steps."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.clock import now_ms
from gateway.domain.log import LogService, committed_entries
from gateway.domain.txn import ABORTED, COMMITTED, InvalidTransactionTimeout, TransactionCoordinator
from gateway.errors import InvalidProducerEpoch, InvalidTxnState, ProducerFenced
from gateway.formats.records import BatchBuilder, build_control_batch, iter_records, parse_header
from gateway.store import Store

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster


@pytest.fixture
async def env(redis_url):
    store = Store.open(redis_url)
    logs = LogService(store, auto_create=False)
    tc = TransactionCoordinator(store, default_timeout_ms=5_000, max_timeout_ms=10_000,
                                notify_partition=logs.notifier.notify)
    yield logs, tc
    await store.close()


def txn_batch(info, *values: bytes, seq: int = 0) -> bytes:
    b = BatchBuilder(producer_id=info.producer_id, producer_epoch=info.producer_epoch, base_sequence=seq,
                     transactional=True)
    for v in values:
        b.append(v)
    return b.build()


def plain(*values: bytes) -> bytes:
    b = BatchBuilder()
    for v in values:
        b.append(v)
    return b.build()


async def committed_values(logs, topic, partition):
    sl = await logs.read(topic, partition, 0, 1000, read_committed=True)
    return [r.value for e in committed_entries(sl) for r in iter_records(e.batch, e.base_offset)]


async def test_commit_across_partitions_makes_everything_visible_at_once(env):
    logs, tc = env
    await logs.create_topic("a", 2)
    await logs.create_topic("b", 1)
    txn = await tc.begin()
    info = await tc.describe(txn)
    parts = [("a", 0), ("a", 1), ("b", 0)]
    await tc.add_partitions(txn, parts)
    await logs.append([(t, p, txn_batch(info, f"{t}{p}".encode())) for t, p in parts])
    await logs.append([("a", 0, plain(b"after"))])
    assert await committed_values(logs, "a", 0) == []  # the open transaction holds the LSO
    assert await tc.end(txn, commit=True) == COMMITTED
    assert await committed_values(logs, "a", 0) == [b"a0", b"after"]
    assert await committed_values(logs, "a", 1) == [b"a1"]
    assert await committed_values(logs, "b", 0) == [b"b0"]
    sl = await logs.read("a", 0, 0, read_committed=True)
    assert sl.stable == sl.high_watermark == 3  # data, plain batch, marker
    marker = parse_header(sl.entries[2].batch)
    assert marker.control and marker.producer_id == info.producer_id
    assert (await tc.describe(txn)).state == COMMITTED


async def test_abort_hides_the_batches_and_lists_the_range(env):
    logs, tc = env
    await logs.create_topic("t", 1)
    await logs.append([("t", 0, plain(b"before"))])
    txn = await tc.begin()
    info = await tc.describe(txn)
    await tc.add_partitions(txn, [("t", 0)])
    await logs.append([("t", 0, txn_batch(info, b"x", b"y"))])
    assert await tc.end(txn, commit=False) == ABORTED
    await logs.append([("t", 0, plain(b"after"))])
    assert await committed_values(logs, "t", 0) == [b"before", b"after"]
    sl = await logs.read("t", 0, 0, read_committed=True)
    assert [(a.producer_id, a.first_offset, a.marker_offset) for a in sl.aborted] == [(info.producer_id, 1, 3)]
    assert sl.stable == sl.high_watermark


async def one_batch_open(logs: LogService, tc: TransactionCoordinator) -> tuple[Any, Any]:
    """A transaction with one batch on partition 0 of a new topic "t": (its id, its description)."""
    await logs.create_topic("t", 1)
    txn = await tc.begin()
    info = await tc.describe(txn)
    await tc.add_partitions(txn, [("t", 0)])
    await logs.append([("t", 0, txn_batch(info, b"v"))])
    return txn, info


async def test_ending_twice_is_harmless_and_the_other_outcome_is_refused(env):
    logs, tc = env
    txn, _ = await one_batch_open(logs, tc)
    assert await tc.end(txn, commit=True) == COMMITTED
    assert await tc.end(txn, commit=True) == COMMITTED
    _, hw = await logs.bounds("t", 0)
    assert hw == 2  # one marker, not two
    with pytest.raises(InvalidTxnState):
        await tc.end(txn, commit=False)
    with pytest.raises(InvalidTxnState):
        await tc.add_partitions(txn, [("t", 0)])


async def test_a_stale_epoch_is_fenced(env):
    _, tc = env
    txn = await tc.begin(producer_id=77, producer_epoch=3)
    with pytest.raises(ProducerFenced):
        await tc.add_partitions(txn, [("t", 0)], epoch=2)
    with pytest.raises(ProducerFenced):
        await tc.end(txn, commit=True, epoch=2)


async def test_timeout_over_the_maximum_is_refused(env):
    _, tc = env
    with pytest.raises(InvalidTransactionTimeout):
        await tc.begin(timeout_ms=60_000)


async def test_the_reaper_aborts_expired_transactions(env):
    logs, tc = env
    await logs.create_topic("t", 1)
    txn = await tc.begin(timeout_ms=50)
    info = await tc.describe(txn)
    await tc.add_partitions(txn, [("t", 0)])
    await logs.append([("t", 0, txn_batch(info, b"v"))])
    live = await tc.begin(timeout_ms=5_000)
    deadline = now_ms() + 5_000
    while now_ms() < deadline and (await tc.describe(txn)).state != ABORTED:
        await tc.recover()
        await asyncio.sleep(0.02)
    assert (await tc.describe(txn)).state == ABORTED
    assert (await tc.describe(live)).state == "OPEN"
    sl = await logs.read("t", 0, 0, read_committed=True)
    assert sl.stable == sl.high_watermark == 2


async def test_a_coordinator_dying_after_the_point_of_no_return_is_rolled_forward(env, redis_url):
    logs, tc = env
    await logs.create_topic("t", 2)
    txn = await tc.begin()
    info = await tc.describe(txn)
    await tc.add_partitions(txn, [("t", 0), ("t", 1)])
    await logs.append([("t", p, txn_batch(info, b"v%d" % p)) for p in range(2)])
    # what a coordinator leaves behind when it dies right after COMMITTING became durable
    ending = await tc.txns.end(str(txn), True)
    assert ending.state == "COMMITTING"
    # and when it got one partition's marker out before dying
    marker = build_control_batch(True, info.producer_id, info.producer_epoch)
    await tc.txns.write_markers([("t", 0)], info.producer_id, info.producer_epoch, True, marker)
    other_store = Store.open(redis_url)
    assert await TransactionCoordinator(other_store).recover() == 1
    await other_store.close()
    assert (await tc.describe(txn)).state == COMMITTED
    assert await committed_values(logs, "t", 0) == [b"v0"]
    assert await committed_values(logs, "t", 1) == [b"v1"]
    assert (await logs.bounds("t", 0))[1] == 2  # still one marker on the partition done before


async def test_an_operators_markers_are_appended_as_kafka_appends_them(env):
    """WriteTxnMarkers (`kafka-transactions abort`) appends its marker whatever the producer has open
    on the partition, and refuses an epoch older than the producer's; the coordinator's own markers,
    above, never write a second one."""
    logs, tc = env
    _, info = await one_batch_open(logs, tc)
    with pytest.raises(InvalidProducerEpoch):
        await tc.write_markers([("t", 0)], info.producer_id, info.producer_epoch - 1, False)
    assert (await logs.bounds("t", 0))[1] == 1
    await tc.write_markers([("t", 0)], info.producer_id, info.producer_epoch, False)  # ends the open one
    await tc.write_markers([("t", 0)], info.producer_id, info.producer_epoch, False)  # nothing open: all the same
    assert (await logs.bounds("t", 0))[1] == 3
    assert await committed_values(logs, "t", 0) == []
