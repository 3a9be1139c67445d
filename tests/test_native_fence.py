"""Transaction keys on the native face: one live connection and one transaction per key. A newer
epoch aborts the older one's transaction at once and closes its connection; everything the older
task does afterwards fails."""

from __future__ import annotations

import asyncio

import pytest

from gateway.client import Client, ConnectionLost, ExpiredTransactionError, InvalidConfig, NotAllowed
from gateway.client.connection import Connection
from gateway.errors import InvalidRequest
from gateway.server.gateway import Gateway
from gateway.store.embedded import free_port
from tests.conftest import native_url, test_config
from tests.test_native_txn import N, produce_inputs, read_all

KEY = "job-42"


async def process(client: Client, consumer, count: int):
    """Receive `count` inputs, send their outputs and ack them cumulatively, all in one transaction."""
    producer = await client.create_producer("out")
    txn = await client.new_transaction(timeout=60)  # far longer than the test: only fencing ends it
    got = [await consumer.receive(10) for _ in range(count)]
    for m in got:
        await producer.send(m.value.replace(b"in", b"out"), txn=txn)
    await consumer.acknowledge_cumulative(max(got, key=lambda m: m.offset), txn=txn)
    return txn, producer, got


@pytest.mark.parametrize("cut", [False, True], ids=["silent", "connection-cut"])
async def test_a_newer_task_fences_the_older_one(gateway, cut):
    url = native_url(gateway)
    async with await Client.connect(url) as setup:
        await produce_inputs(setup, "in")

    task1 = await Client.connect(url, transaction_key=KEY, reconnect=not cut)
    old_epoch = task1.epoch
    c1 = await task1.subscribe("in", "proc", mode="failover", initial_position="earliest")
    txn1, p1, got1 = await process(task1, c1, 4)
    if cut:
        task1._conn.writer.transport.abort()  # the network drops it; the gateway still has the txn open

    async with await Client.connect(url, transaction_key=KEY) as task2:
        assert task2.epoch == old_epoch + 1
        c2 = await task2.subscribe("in", "proc", mode="failover", initial_position="earliest")
        # task 1's transaction was aborted when task 2 connected: its inputs come to task 2 at once
        txn2, _, got2 = await process(task2, c2, N)
        await txn2.commit()

        # every later step of task 1 fails
        steps = {
            "send": p1.send(b"zombie", txn=txn1),
            "ack": c1.acknowledge(got1[0], txn=txn1),
            "cumulative ack": c1.acknowledge_cumulative(got1[-1], txn=txn1),
            "commit": txn1.commit(),
        }
        expected = (ExpiredTransactionError, ConnectionLost) if cut else ExpiredTransactionError
        for name, step in steps.items():
            with pytest.raises(expected):
                await step
                pytest.fail(f"{name} of the fenced task succeeded")
        if not cut:
            assert isinstance(task1.fenced, NotAllowed)  # its reconnect with the old epoch was refused
        with pytest.raises(NotAllowed):
            await Client.connect(url, transaction_key=KEY, epoch=old_epoch, reconnect=False)
        with pytest.raises(ExpiredTransactionError if not cut else ConnectionLost) as refused:
            await task1.new_transaction()
        if not cut:
            assert str(refused.value).count(repr(KEY)) == 1, refused.value  # the key named once

        assert sorted(m.value for m in got2) == sorted(f"in-{i}".encode() for i in range(N))
        out = await read_all(task2, "out")
        assert sorted(out) == sorted(f"out-{i}".encode() for i in range(N))
    await task1.close()


async def test_the_gateway_closes_the_older_connection_at_once(gateway):
    url = native_url(gateway)
    old = await Connection.open("127.0.0.1", gateway.listeners["native"].port, timeout=5,
                                transaction_key=KEY)
    lost = asyncio.get_running_loop().create_future()
    old.on_lost = lambda reason: lost.done() or lost.set_result(reason)
    async with await Client.connect(url, transaction_key=KEY) as newer:
        assert newer.epoch == old.epoch + 1
        assert isinstance(await asyncio.wait_for(lost, 5), ConnectionLost)
    await old.close()


async def test_bad_keys_and_timeouts(gateway):
    url = native_url(gateway)
    with pytest.raises(ValueError, match="&"):
        await Client.connect(url, transaction_key="a&b")
    with pytest.raises(InvalidRequest, match="&"):  # the gateway checks too
        await Connection.open("127.0.0.1", gateway.listeners["native"].port, timeout=5, transaction_key="a&b")
    async with await Client.connect(url, transaction_key=KEY) as client:
        with pytest.raises(InvalidConfig, match="maximum"):
            await client.new_transaction(timeout=3600)


async def test_epochs_survive_a_gateway_restart(redis_url):
    port = free_port()
    cfg = test_config(redis_url, native_port=port)
    gw = Gateway(cfg)
    await gw.start()
    client = await Client.connect(f"gateway://127.0.0.1:{port}", transaction_key=KEY)
    first = client.epoch
    txn = await client.new_transaction()
    await gw.stop()

    gw = Gateway(test_config(redis_url, native_port=port))
    await gw.start()
    try:
        # the client's reconnect presents its epoch and is given the next one; its open transaction,
        # fenced by that new epoch, is over
        with pytest.raises(ExpiredTransactionError):
            await txn.commit()
        assert client.epoch == first + 1
        with pytest.raises(NotAllowed):
            await Client.connect(f"gateway://127.0.0.1:{port}", transaction_key=KEY, epoch=first, reconnect=False)
        await (await client.new_transaction()).commit()
    finally:
        await client.close()
        await gw.stop()


async def test_the_gateway_refuses_every_step_of_a_fenced_epoch(gateway):
    """What the older connection meets if its requests arrive before it is closed: the coordinator's
    and the log's epoch checks, answered as ExpiredTransactionError."""
    from gateway.formats.records import BatchBuilder
    from gateway.native.transactions import TxnSession

    services = gateway.services
    await services.log.create_topic("out", 1)
    old, new = TxnSession(services), TxnSession(services)
    await old.connect(KEY, -1, on_fenced=lambda: None)
    txn = await old.begin(0)
    await old.add_partitions(txn.txn_id, [("out", 0)])
    await new.connect(KEY, -1, on_fenced=lambda: None)  # a fresh task takes the key
    for step in (old.add_partitions(txn.txn_id, [("out", 0)]),
                 old.add_subscriptions(txn.txn_id, [("in", 0, "proc")]),
                 old.end(txn.txn_id, True)):
        with pytest.raises(ExpiredTransactionError):
            await step
    b = BatchBuilder(producer_id=txn.producer_id, producer_epoch=txn.producer_epoch, base_sequence=0,
                     transactional=True)
    b.append(b"zombie")
    (res,) = await services.log.append([("out", 0, b.build())])
    from gateway.native.transactions import as_expired
    assert isinstance(as_expired(txn.txn_id, res.result), ExpiredTransactionError)


async def test_epochs_survive_a_killed_gateway_process(gateway_process):
    """SIGKILL, then `gateway serve` again on the same data: the key's epoch is where it was."""
    await asyncio.to_thread(gateway_process.start)
    first = await Client.connect(gateway_process.native_url, transaction_key=KEY, reconnect=False)
    second = await Client.connect(gateway_process.native_url, transaction_key=KEY, reconnect=False)
    assert second.epoch == first.epoch + 1
    epoch = second.epoch
    await first.close()
    await second.close()
    await asyncio.to_thread(gateway_process.kill)
    await asyncio.to_thread(gateway_process.start)
    with pytest.raises(NotAllowed):
        await Client.connect(gateway_process.native_url, transaction_key=KEY, epoch=epoch - 1, reconnect=False)
    async with await Client.connect(gateway_process.native_url, transaction_key=KEY, epoch=epoch) as again:
        assert again.epoch == epoch + 1
