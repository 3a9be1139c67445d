"""The blocking client: the async client's names, each call waiting, run from a plain thread (the
gateway under test serves on this test's event loop, which a blocking call here would stall)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.client import BatchReceivePolicy, ConnectionLost, NotAllowed, Timeout
from gateway.client.blocking import Client
from tests.conftest import native_url


def round_trip(url: str) -> dict[str, object]:
    with Client.connect(url) as client:
        consumer = client.subscribe("blocking", "s", "key_shared", "earliest", consumer_name="c")
        with client.create_producer("blocking") as producer:
            sent = [producer.send(b"v%d" % i, key=b"k") for i in range(3)]
        got = [consumer.receive(timeout=10) for _ in range(2)]
        for m in got:
            consumer.acknowledge(m)
        batch = consumer.batch_receive(BatchReceivePolicy(max_num_messages=5, timeout=0.3))
        with pytest.raises(Timeout):
            consumer.receive(timeout=0.1)
        with pytest.raises(NotAllowed):  # the async client's errors, as they are
            consumer.acknowledge_cumulative(got[0])
        txn = client.new_transaction(timeout=30)  # a blocking transaction passes back in as it is
        consumer.acknowledge(batch[0], txn=txn)
        producer = client.create_producer("blocking-out")
        producer.send(b"out", txn=txn)
        txn.commit()
        read = [m.value for m in client.read_range("blocking-out", 0, 0)]
        consumer.unsubscribe()
        return {"sent": [str(s) for s in sent], "got": [m.value for m in got + batch], "read": read,
                "repr": repr(client)}


async def test_the_blocking_clients_round_trip(gateway):
    out = await asyncio.to_thread(round_trip, native_url(gateway))
    assert out["sent"] == ["blocking-0@0", "blocking-0@1", "blocking-0@2"]
    assert out["got"] == [b"v0", b"v1", b"v2"] and out["read"] == [b"out"]
    assert str(out["repr"]).startswith("blocking <gateway.client.client.Client")
    assert not gateway.services.subscriptions.active("blocking", "s")


def test_a_blocking_client_that_cannot_connect_raises_and_leaves_no_thread():
    import threading

    before = threading.active_count()
    with pytest.raises(ConnectionLost):
        Client.connect("gateway://127.0.0.1:1", operation_timeout=2, reconnect=False)
    assert threading.active_count() == before
