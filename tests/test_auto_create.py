"""--auto-create-topics on both faces: a native producer or subscription to a missing topic creates it
when the setting is on and is told TopicNotFound when it is off; a Kafka client's Metadata creates it
only when the setting is on and the request allows it (librdkafka consumers never ask)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from confluent_kafka import Consumer, KafkaError

from gateway.client import Client
from gateway.errors import TopicNotFound
from gateway.server.gateway import Gateway
from tests.conftest import kafka_bootstrap, native_url, running_gateway, test_config


@pytest.fixture(params=[True, False], ids=["auto-create", "no-auto-create"])
async def gw(request: pytest.FixtureRequest, redis_url: str) -> AsyncIterator[Gateway]:
    async with running_gateway(test_config(redis_url, auto_create_topics=request.param)) as gateway:
        yield gateway


@contextlib.asynccontextmanager
async def native_client(gw: Gateway) -> AsyncIterator[Client]:
    client = await Client.connect(native_url(gw))
    try:
        yield client
    finally:
        await client.close()


async def topics(gw: Gateway) -> list[str]:
    return [t.name for t in await gw.services.log.list_topics()]


@pytest.mark.parametrize("gw", [True], indirect=True, ids=["auto-create"])
async def test_native_subscribe_and_producer_create_a_missing_topic_when_on(gw):
    async with native_client(gw) as client:
        await (await client.subscribe("sub-made", "s")).close()
        await (await client.create_producer("prod-made")).close()
    assert sorted(await topics(gw)) == ["prod-made", "sub-made"]


@pytest.mark.parametrize("gw", [False], indirect=True, ids=["no-auto-create"])
async def test_native_subscribe_and_producer_are_told_topic_not_found_when_off(gw):
    async with native_client(gw) as client:
        with pytest.raises(TopicNotFound, match="'sub-missing' does not exist"):
            await client.subscribe("sub-missing", "s")
        with pytest.raises(TopicNotFound, match="'prod-missing' does not exist"):
            await client.create_producer("prod-missing")
    assert await topics(gw) == []


@pytest.mark.kafka
async def test_a_librdkafka_consumer_is_told_unknown_topic_whatever_the_setting(gw):
    """librdkafka's consumer asks Metadata with allow_auto_topic_creation false (even with
    allow.auto.create.topics=true, as of 2.16), so the gateway creates nothing for it."""

    def first_error() -> int:
        consumer = Consumer({"bootstrap.servers": kafka_bootstrap(gw), "group.id": "g",
                             "allow.auto.create.topics": "true"})
        try:
            consumer.subscribe(["k-missing"])
            while True:
                msg = consumer.poll(10)
                assert msg is not None, "no error within 10 s"
                if msg.error():
                    return int(msg.error().code())
        finally:
            consumer.close()

    assert await asyncio.to_thread(first_error) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert await topics(gw) == []
