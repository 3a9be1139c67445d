"""batch_receive and its policy (Pulsar's BatchReceivePolicy), through the native client."""

from __future__ import annotations

import pytest

from gateway.client import BatchReceivePolicy, Client, ClientClosed


async def produce(client: Client, topic: str, values: list[bytes]) -> None:
    async with await client.create_producer(topic, batching=False) as p:
        for v in values:
            await p.send(v)


async def test_a_batch_ends_at_its_message_count(client):
    c = await client.subscribe("br", "s", initial_position="earliest",
                               batch_receive_policy=BatchReceivePolicy(max_num_messages=4, timeout=0))
    await produce(client, "br", [b"m%d" % i for i in range(10)])
    assert [m.offset for m in await c.batch_receive()] == [0, 1, 2, 3]
    assert [m.offset for m in await c.batch_receive()] == [4, 5, 6, 7]
    # the timeout ends a batch with what came: the two left (seconds for them to come, on a loaded
    # machine), then nothing
    rest = BatchReceivePolicy(max_num_messages=4, timeout=3)
    assert [m.offset for m in await c.batch_receive(rest)] == [8, 9]
    assert await c.batch_receive(BatchReceivePolicy(max_num_messages=4, timeout=0.3)) == []


async def test_a_batch_ends_before_its_byte_limit_and_a_larger_message_goes_alone(client):
    c = await client.subscribe("brb", "s", initial_position="earliest")
    await produce(client, "brb", [b"a" * 100, b"b" * 100, b"c" * 100, b"d" * 400, b"e" * 10])
    policy = BatchReceivePolicy(max_num_bytes=250, timeout=0)
    assert [len(m.value) for m in await c.batch_receive(policy)] == [100, 100]
    assert [len(m.value) for m in await c.batch_receive(policy)] == [100]
    assert [len(m.value) for m in await c.batch_receive(policy)] == [400]  # over the limit: alone
    for m in await c.batch_receive(BatchReceivePolicy(max_num_bytes=250, timeout=0.3)):
        await c.acknowledge(m)


def test_a_policy_needs_a_limit():
    with pytest.raises(ValueError):
        BatchReceivePolicy(max_num_messages=0, max_num_bytes=0, timeout=0)
    assert BatchReceivePolicy() == BatchReceivePolicy(-1, 10 * 1024 * 1024, 0.1)  # Pulsar's defaults


async def test_a_closed_consumer_gives_what_it_holds_then_refuses(client):
    c = await client.subscribe("brc", "s", initial_position="earliest")
    await c.close()
    with pytest.raises(ClientClosed):
        await c.batch_receive()
