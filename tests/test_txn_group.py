"""Group commits: transactions opened by many clients (a distributed job's tasks) made visible at one
point of no return by another (its driver), once per commit id, fenced by the driver's transaction
key and incarnation, cleaning up what tasks that died left. (SIGKILL mid-way: test_txn_crash.)"""

from __future__ import annotations

import pytest

from gateway.client import Client, ExpiredTransactionError, NotAllowed, Transaction
from gateway.client.errors import ConnectionLost
from gateway.domain.txn import ABORTED, COMMITTED
from gateway.errors import InvalidRequest
from tests.conftest import native_url


async def task_write(url: str, topic: str, values: list[bytes], **group: object) -> str:
    """What one task does: write in a transaction of its own, leave it open, hand over its id."""
    async with await Client.connect(url) as client:
        producer = await client.create_producer(topic)
        txn = await client.new_transaction(timeout=30, **group)
        for i, v in enumerate(values):
            await producer.send(v, partition=i % producer.partitions, txn=txn)
        await txn.flush()
        return txn.txn_id


async def visible(client: Client, topic: str) -> list[bytes]:
    out = []
    for info in await client.list_partitions(topic):
        out += [m.value async for m in client.read_range(topic, info.partition, 0)]
    return sorted(out)


async def test_tasks_transactions_become_visible_together_once_per_commit_id(gateway):
    url = native_url(gateway)
    await gateway.services.log.create_topic("out", 2)
    txns = [await task_write(url, "out", [b"a1", b"a2"]), await task_write(url, "out", [b"b1"])]
    async with await Client.connect(url, transaction_key="job", incarnation="run-1") as driver:
        assert await visible(driver, "out") == []
        assert await driver.commit_transactions(txns, commit_id=0)
        assert await visible(driver, "out") == [b"a1", b"a2", b"b1"]
        # the same batch again (a replay after a crash that lost the job's own record of the commit)
        again = [await task_write(url, "out", [b"a1", b"a2"]), await task_write(url, "out", [b"b1"])]
        assert not await driver.commit_transactions(again, commit_id=0)
        assert await visible(driver, "out") == [b"a1", b"a2", b"b1"]
        assert all(i.last_stable_offset == i.high_watermark for i in await driver.list_partitions("out"))
        assert await driver.commit_transactions([await task_write(url, "out", [b"c"])], commit_id=1)
        assert await visible(driver, "out") == [b"a1", b"a2", b"b1", b"c"]
        states = {t: (await gateway.services.txn.describe(t)).state for t in txns + again}
        assert states == {**dict.fromkeys(txns, COMMITTED), **dict.fromkeys(again, ABORTED)}


async def test_a_commit_aborts_what_tasks_that_died_left_for_it(gateway):
    url = native_url(gateway)
    await gateway.services.log.create_topic("orph", 1)
    lived = await task_write(url, "orph", [b"lived"], group_key="job", group_commit_id=3)
    died = await task_write(url, "orph", [b"died"], group_key="job", group_commit_id=3)
    older = await task_write(url, "orph", [b"older"], group_key="job", group_commit_id=1)
    later = await task_write(url, "orph", [b"later"], group_key="job", group_commit_id=4)
    async with await Client.connect(url, transaction_key="job", incarnation="run-1") as driver:
        assert await driver.commit_transactions([lived], commit_id=3)
        assert await visible(driver, "orph") == [b"lived"]
        describe = gateway.services.txn.describe
        assert [(await describe(t)).state for t in (died, older, later)] == [ABORTED, ABORTED, "OPEN"]
        assert await driver.commit_transactions([later], commit_id=4)
        info = (await driver.list_partitions("orph"))[0]
        assert info.last_stable_offset == info.high_watermark  # nothing left holding readers back


async def test_one_transaction_that_ended_refuses_the_whole_group(gateway):
    url = native_url(gateway)
    good = await task_write(url, "grp", [b"good"])
    gone = await task_write(url, "grp", [b"gone"])
    async with await Client.connect(url, transaction_key="job", incarnation="run-1") as driver:
        await driver.abort_transactions([gone])
        with pytest.raises(ExpiredTransactionError, match=gone):
            await driver.commit_transactions([good, gone], commit_id=5)
        assert (await gateway.services.txn.describe(good)).state == "OPEN"
        assert await visible(driver, "grp") == []
        assert await driver.commit_transactions([good], commit_id=5)  # the commit id was not taken
        assert await visible(driver, "grp") == [b"good"]


async def test_incarnations_share_an_epoch_and_a_former_one_is_a_zombie(gateway):
    url = native_url(gateway)
    first = await Client.connect(url, transaction_key="q", incarnation="run-1", reconnect=False)
    second = await Client.connect(url, transaction_key="q", incarnation="run-1", reconnect=False)
    assert first.epoch == second.epoch  # two processes of one run
    txn = await task_write(url, "z", [b"zombie"])
    newer = await Client.connect(url, transaction_key="q", incarnation="run-2", reconnect=False)
    assert newer.epoch == first.epoch + 1
    with pytest.raises((ExpiredTransactionError, ConnectionLost)):  # its connection is closed at once
        await first.commit_transactions([txn], commit_id=0)
    with pytest.raises(NotAllowed):
        await Client.connect(url, transaction_key="q", incarnation="run-1")
    assert await newer.commit_transactions([await task_write(url, "z", [b"new"])], commit_id=0)
    for c in (first, second, newer):
        await c.close()
    state = await gateway.services.fence.get("", "q")
    assert (state.epoch, state.incarnation) == (newer.epoch, "run-2")


async def test_what_a_group_commit_refuses(gateway):
    url = native_url(gateway)
    async with await Client.connect(url) as plain, \
            await Client.connect(url, transaction_key="own") as keyed:
        txn = await task_write(url, "r", [b"x"])
        with pytest.raises(InvalidRequest, match="transaction key"):
            await plain.commit_transactions([txn], commit_id=1)
        own: Transaction = await keyed.new_transaction(timeout=30)
        with pytest.raises(InvalidRequest, match="belongs to a transaction key"):
            await plain.commit_transactions([own.txn_id])
        assert await plain.commit_transactions([txn])  # without a key: no fencing, no commit id
    with pytest.raises(ValueError):
        await Client.connect(url, incarnation="run-1")
