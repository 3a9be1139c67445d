"""Transaction keys with epochs on a real Redis: one live connection and transaction per key."""

from __future__ import annotations

import asyncio

import pytest

from gateway.domain.fence import FenceService
from gateway.domain.log import LogService, committed_entries
from gateway.domain.txn import ABORTED, COMMITTED, TransactionCoordinator
from gateway.errors import InvalidProducerEpoch, InvalidRequest, NotAllowed, ProducerFenced
from gateway.formats.records import BatchBuilder, iter_records
from gateway.store import Store


class Gateway:
    """The services of one gateway process over the shared Redis."""

    def __init__(self, redis_url: str) -> None:
        self.store = Store.open(redis_url)
        self.log = LogService(self.store, auto_create=False)
        self.txn = TransactionCoordinator(self.store, notify_partition=self.log.notifier.notify)
        self.fence = FenceService(self.store, self.txn)


@pytest.fixture
async def gws(redis_url):
    made: list[Gateway] = []

    def make() -> Gateway:
        made.append(Gateway(redis_url))
        return made[-1]

    yield make
    for g in made:
        await g.store.close()


def txn_batch(pid: int, epoch: int, value: bytes, seq: int = 0) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
    b.append(value)
    return b.build()


async def visible(gw, topic):
    sl = await gw.log.read(topic, 0, 0, 1000, read_committed=True)
    return [r.value for e in committed_entries(sl) for r in iter_records(e.batch, e.base_offset)]


async def test_connecting_bumps_the_epoch_and_closes_the_older_connection(gws):
    gw = gws()
    closed: list[int] = []
    first = await gw.fence.connect("", "job-42", on_fenced=lambda: closed.append(0))
    assert first.epoch == 0
    second = await gw.fence.connect("", "job-42", on_fenced=lambda: closed.append(1))
    assert second.epoch == 1 and closed == [0]
    assert second.producer_id == first.producer_id
    with pytest.raises(NotAllowed, match="stale"):
        await gw.fence.connect("", "job-42", epoch=0)
    third = await gw.fence.connect("", "job-42", epoch=1)  # the current holder reconnecting
    assert third.epoch == 2


async def test_a_new_task_aborts_the_old_transaction_at_once_and_fences_every_later_step(gws):
    gw = gws()
    await gw.log.create_topic("out", 1)
    task1 = await gw.fence.connect("", "job-42")
    txn1, pid1 = await gw.fence.begin("", "job-42", task1.epoch, own_producer=True)
    await gw.txn.add_partitions(txn1, [("out", 0)], epoch=task1.epoch)
    await gw.log.append([("out", 0, txn_batch(pid1, task1.epoch, b"from task 1"))])

    task2 = await gw.fence.connect("", "job-42")  # task 1 went silent; task 2 takes over
    assert task2.aborted_txn == str(txn1)
    assert (await gw.txn.describe(txn1)).state == ABORTED
    txn2, pid2 = await gw.fence.begin("", "job-42", task2.epoch, own_producer=True)
    await gw.txn.add_partitions(txn2, [("out", 0)], epoch=task2.epoch)
    await gw.log.append([("out", 0, txn_batch(pid2, task2.epoch, b"from task 2"))])
    assert await gw.txn.end(txn2, commit=True, epoch=task2.epoch) == COMMITTED
    assert await visible(gw, "out") == [b"from task 2"]  # readable without waiting for a timeout

    with pytest.raises(ProducerFenced):
        await gw.txn.add_partitions(txn1, [("out", 0)], epoch=task1.epoch)
    with pytest.raises(ProducerFenced):
        await gw.txn.end(txn1, commit=True, epoch=task1.epoch)
    (late,) = await gw.log.append([("out", 0, txn_batch(pid1, task1.epoch, b"late", seq=1))])
    assert isinstance(late.result, InvalidProducerEpoch)
    with pytest.raises(NotAllowed):
        await gw.fence.begin("", "job-42", task1.epoch)
    assert await visible(gw, "out") == [b"from task 2"]


async def test_keys_are_per_owner_and_may_not_hold_an_ampersand(gws):
    gw = gws()
    a = await gw.fence.connect("alice", "job")
    b = await gw.fence.connect("bob", "job")
    assert (a.epoch, b.epoch) == (0, 0) and a.producer_id != b.producer_id
    with pytest.raises(InvalidRequest, match="&"):
        await gw.fence.connect("alice", "a&b")


async def test_the_producer_id_rotates_when_the_epoch_runs_out(gws):
    gw = gws()
    first = await gw.fence.connect("", "k", max_epoch=2)
    await gw.fence.connect("", "k", max_epoch=2)
    third = await gw.fence.connect("", "k", max_epoch=2)
    rotated = await gw.fence.connect("", "k", max_epoch=2)
    assert (first.epoch, third.epoch, rotated.epoch) == (0, 2, 0)
    assert rotated.producer_id != first.producer_id


async def test_epochs_survive_a_restart_and_racing_gateways_never_share_one(gws):
    gw1, gw2 = gws(), gws()
    results = await asyncio.gather(*(g.fence.connect("", "shared") for g in [gw1, gw2] * 10))
    epochs = [r.epoch for r in results]
    assert sorted(epochs) == list(range(20))
    restarted = gws()
    assert (await restarted.fence.get("", "shared")).epoch == 19
    assert (await restarted.fence.connect("", "shared")).epoch == 20


async def test_admin_view_and_delete(gws):
    gw = gws()
    conn = await gw.fence.connect("", "job-7")
    txn, _ = await gw.fence.begin("", "job-7", conn.epoch, own_producer=True)
    listed = await gw.fence.list()
    assert [(k.name, k.epoch, k.txn) for k in listed] == [("anonymous&job-7", 0, str(txn))]
    await gw.fence.delete("anonymous&job-7")
    assert (await gw.txn.describe(txn)).state == ABORTED
    assert await gw.fence.list() == []
