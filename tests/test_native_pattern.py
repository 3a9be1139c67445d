"""Pattern subscriptions of the native client (Pulsar's topicsPattern): every topic whose whole name
matches, one created after the subscription included, through one receive."""

from __future__ import annotations

import pytest

from gateway.client import Client, InvalidRequest
from gateway.server.gateway import Gateway
from tests.conftest import eventually

TIMEOUT = 30.0


async def test_a_pattern_subscription_picks_up_a_topic_created_after_it(client: Client) -> None:
    eu = await client.create_producer("orders-eu")
    await eu.send(b"from eu")
    await (await client.create_producer("refunds")).send(b"not an order")
    await client.create_producer("orders-eu-all-DLQ")  # the subscription's own: never a match
    async with await client.subscribe_pattern("orders-.*", "all", "shared", "earliest",
                                              pattern_auto_discovery_period=0.1) as consumer:
        first = await consumer.receive(TIMEOUT)
        await consumer.acknowledge(first)
        us = await client.create_producer("orders-us")  # created now: found by the next discovery
        await us.send(b"from us")
        later = await consumer.receive(TIMEOUT)
        await consumer.acknowledge(later)
        assert sorted(consumer.consumers) == ["orders-eu", "orders-us"]
    assert [(first.topic, first.value), (later.topic, later.value)] == [("orders-eu", b"from eu"),
                                                                        ("orders-us", b"from us")]


async def test_a_deleted_topic_is_left(gateway: Gateway, client: Client) -> None:
    await client.create_producer("logs-a")
    await client.create_producer("logs-b")
    async with await client.subscribe_pattern("logs-.*", "tail", pattern_auto_discovery_period=0.1) as consumer:
        assert sorted(consumer.consumers) == ["logs-a", "logs-b"]
        await gateway.services.log.delete_topic("logs-a")
        await eventually(lambda: sorted(consumer.consumers) == ["logs-b"], TIMEOUT, "logs-a left")


async def test_topics_match_by_the_whole_name_in_re2_syntax(client: Client) -> None:
    for topic in ("a1", "a12", "ba1"):
        await client.create_producer(topic)
    assert await client.list_topics(r"a\d") == ["a1"]
    assert await client.list_topics(r"\Qa1\E.*") == ["a1", "a12"]
    with pytest.raises(InvalidRequest, match="lookaround"):
        await client.list_topics("(?=a)a1")
