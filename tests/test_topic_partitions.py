"""A topic's partition count is at least 1 on every face: 0 or a negative count is refused, never
quietly turned into the default. The native face creates topics only on first use, with the
default (itself checked at start-up)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import InvalidPartitionsError

from gateway.errors import InvalidPartitions, TopicNotFound
from tests.conftest import admin_url, kafka_bootstrap
from tests.test_admin import cli


@pytest.mark.parametrize("count", [0, -3])
async def test_the_log_refuses_a_count_below_one_and_creates_nothing(gateway, count):
    log = gateway.services.log
    with pytest.raises(InvalidPartitions, match=f"at least 1 partition, not {count}"):
        await log.create_topic("none", count)
    with pytest.raises(TopicNotFound):
        await log.topic("none", create=False)
    assert (await log.create_topic("some")).partitions == log.default_partitions  # None: the default


async def test_http_answers_400_invalid_partitions(gateway):
    base = admin_url(gateway) + "/admin/v2/topics"
    async with aiohttp.ClientSession() as http:
        for bad in (0, -3, "2", True):
            async with http.post(base, json={"name": "bad", "partitions": bad}) as r:
                body = await r.json()
                assert r.status == 400 and body["error"] == "INVALID_PARTITIONS", body
        async with http.get(base) as r:
            assert await r.json() == []
        async with http.post(base, json={"name": "default"}) as r:
            assert r.status == 201 and len((await r.json())["partitions"]) == 1


async def test_cli_says_it_in_one_line_and_fails(gateway):
    for count in ("0", "-3"):
        made = await cli(gateway, "topics", "create", "bad", "--partitions", count)
        assert made.returncode != 0 and made.stdout == ""
        assert made.stderr == f"error: INVALID_PARTITIONS: a topic has at least 1 partition, not {count}\n"
    made = await cli(gateway, "topics", "create", "default")
    assert made.returncode == 0 and len(json.loads(made.stdout)["partitions"]) == 1


@pytest.mark.kafka
async def test_kafka_create_topics_answers_invalid_partitions_and_minus_one_is_the_default(gateway):
    """Kafka's CreateTopics: -1 asks for the broker's default, 0 and anything below -1 are
    INVALID_PARTITIONS (ReplicationControlManager.createTopic)."""

    def create(count: int) -> None:
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap(gateway))
        try:
            admin.create_topics([KNewTopic(f"k{count}".replace("-", "m"), count, 1)])
        finally:
            admin.close()

    for count in (0, -3):
        with pytest.raises(InvalidPartitionsError):
            await asyncio.to_thread(create, count)
    await asyncio.to_thread(create, -1)
    log = gateway.services.log
    assert [(t.name, t.partitions) for t in await log.list_topics()] == [("km1", log.default_partitions)]
