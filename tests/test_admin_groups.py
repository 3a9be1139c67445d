"""Consumer groups of both protocols in the admin HTTP API, the `gateway admin groups` CLI and the
Prometheus metrics, against groups that real confluent-kafka consumers form."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import threading
from collections.abc import AsyncIterator

import aiohttp
import confluent_kafka as ck
import pytest

from tests import conftest
from tests.conftest import admin_url, kafka_bootstrap
from tests.test_admin import cli
from tests.test_metrics import samples, scrape, value

pytestmark = pytest.mark.kafka

eventually = functools.partial(conftest.eventually, timeout=45.0)
TOPIC = "watched"


REGEX = "^watch.*"


class Member:
    """A consumer polling in its own thread until stopped, so its group stays formed; it commits
    partition 0 at 1 and partition 1 at 2 once it owns both. Of the consumer protocol it subscribes
    by regular expression, of the classic one by name."""

    def __init__(self, bootstrap: str, group: str, protocol: str) -> None:
        conf: dict[str, object] = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                                   "enable.auto.commit": False, "client.id": f"{protocol}-member"}
        if protocol == "classic":
            conf |= {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
        self.consumer = ck.Consumer(conf)
        self.regex = protocol == "consumer"
        self.stop = threading.Event()
        self.committed = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        self.consumer.subscribe([REGEX if self.regex else TOPIC])
        while not self.stop.is_set():
            self.consumer.poll(0.1)
            if not self.committed.is_set() and len(self.consumer.assignment()) == 2:
                # refused (the member's epoch moved on meanwhile): again on the next round
                with contextlib.suppress(ck.KafkaException):
                    done = self.consumer.commit(
                        offsets=[ck.TopicPartition(TOPIC, 0, 1), ck.TopicPartition(TOPIC, 1, 2)], asynchronous=False)
                    if all(tp.error is None for tp in done):
                        self.committed.set()
        self.consumer.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Member]:
        self.thread.start()
        try:
            yield self
        finally:
            self.stop.set()
            await asyncio.to_thread(self.thread.join, 30)  # its close talks to the gateway on this loop


@pytest.fixture
async def watched(gateway) -> AsyncIterator[None]:
    """A topic of two partitions holding 3 and 2 records."""
    await gateway.services.log.create_topic(TOPIC, 2)
    producer = ck.Producer({"bootstrap.servers": kafka_bootstrap(gateway)})
    for partition, count in ((0, 3), (1, 2)):
        for i in range(count):
            producer.produce(TOPIC, b"%d" % i, partition=partition)
    assert await asyncio.to_thread(producer.flush, 30) == 0
    yield


async def get(gw, path: str) -> tuple[int, object]:
    async with aiohttp.ClientSession() as http, http.get(admin_url(gw) + "/admin/v2" + path) as r:
        return r.status, await r.json()


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
async def test_a_group_is_described_with_members_partitions_offsets_and_lag(gateway, watched, protocol):
    group = f"{protocol}-watchers"
    async with Member(kafka_bootstrap(gateway), group, protocol).running() as member:
        async def stable() -> object:
            if not member.committed.is_set():  # before the look, or the look may precede the commit
                return False
            status, body = await get(gateway, f"/groups/{group}")
            return status == 200 and body["state"] == "Stable" and body
        view = await eventually(stable, what="a stable group with its offsets committed")
        assert isinstance(view, dict)
        assert view["type"] == protocol and view["group_id"] == group
        [m] = view["members"]
        assert m["assigned"] == {TOPIC: [0, 1]} and m["client_id"] == f"{protocol}-member"
        if protocol == "consumer":
            # as librdkafka sends it: its subscription's expressions joined, each in parentheses
            assert m["subscribed_regex"] == f"({REGEX})" and m["subscribed_topics"] == []
            assert view["protocol_type"] == "consumer" and view["assignor"] == "uniform"
            assert view["group_epoch"] >= 1 and view["assignment_epoch"] == view["group_epoch"]
            assert m["member_epoch"] == view["group_epoch"] and m["target"] == {TOPIC: [0, 1]}
        else:
            assert m["subscribed_topics"] == [TOPIC] and m["subscribed_regex"] is None
            assert view["protocol_type"] == "consumer" and view["assignor"] in ("range", "roundrobin")
            assert view["group_epoch"] >= 1 and view["assignment_epoch"] is None and m["member_epoch"] is None
        assert [(o["partition"], o["committed"], o["high_watermark"], o["lag"]) for o in view["offsets"]] == [
            (0, 1, 3, 2), (1, 2, 2, 0)]
        assert view["lag"] == {TOPIC: 2}

        status, listed = await get(gateway, "/groups")
        assert status == 200 and listed == [{"group_id": group, "type": protocol, "protocol_type": "consumer",
                                             "state": "Stable", "group_epoch": view["group_epoch"],
                                             "members": 1, "lag": {TOPIC: 2}}]

        got = samples(await scrape(gateway))
        assert value(got, "gateway_consumer_group_members", group=group, type=protocol) == 1
        assert value(got, "gateway_consumer_group_epoch", group=group, type=protocol) == view["group_epoch"]
        assert value(got, "gateway_consumer_group_topic_lag", group=group, topic=TOPIC) == 2
        assert value(got, "gateway_consumer_group_lag", group=group, topic=TOPIC, partition="0") == 2

        described = await cli(gateway, "groups", "describe", group)
        assert described.returncode == 0, described.stderr
        assert json.loads(described.stdout)["offsets"] == view["offsets"]
        assert [g["group_id"] for g in json.loads((await cli(gateway, "groups", "list")).stdout)] == [group]


async def test_an_unknown_group_is_not_found(gateway):
    status, body = await get(gateway, "/groups/nobody")
    assert status == 404 and isinstance(body, dict) and body["error"] == "GROUP_ID_NOT_FOUND"
    missing = await cli(gateway, "groups", "describe", "nobody")
    assert missing.returncode != 0 and "GROUP_ID_NOT_FOUND" in missing.stderr
