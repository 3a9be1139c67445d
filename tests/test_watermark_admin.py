"""Watermarks on the admin face: per partition, per subscription and per Kafka consumer group over
HTTP, the CLI and Prometheus; and what survives a gateway killed with SIGKILL."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import aiohttp
import confluent_kafka as ck
import pytest

from gateway.client import Client
from tests.conftest import admin_url, eventually, kafka_bootstrap, native_url


async def get(url: str) -> tuple[int, object]:
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        return r.status, (await r.json() if r.content_type == "application/json" else await r.text())



def commit_group_offsets(bs: str, topic: str, group: str, offsets: dict[int, int]) -> None:
    """A Kafka consumer group commits offsets, as a consumer that processed up to them would."""
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        parts = [ck.TopicPartition(topic, p, o) for p, o in offsets.items()]
        consumer.assign(parts)
        consumer.commit(offsets=parts, asynchronous=False)
    finally:
        consumer.close()


@pytest.mark.kafka
async def test_watermarks_per_partition_subscription_and_group(gateway):
    t = "wm-admin"
    await gateway.services.log.create_topic(t, 2)
    async with await Client.connect(native_url(gateway)) as client:
        a = await client.create_producer(t, "a", batching=False)
        b = await client.create_producer(t, "b", batching=False)
        m0 = await a.send(b"m0", partition=0, event_time=900)  # p0: 0
        await a.send_watermark(1000)  # p0: 1, p1: 0
        await b.send_watermark(400)  # p0: 2, p1: 1
        await a.send(b"m1", partition=0, event_time=1100)  # p0: 3
        await b.mark_idle()  # p0: 4, p1: 2
        consumer = await client.subscribe(t, "s", initial_position="earliest")
        got = await consumer.receive(5)
        assert got.message_id == m0
        await consumer.acknowledge(got)  # p0 stops at m1, not acknowledged: a 1000 and b 400 count there
        await asyncio.to_thread(commit_group_offsets, kafka_bootstrap(gateway), t, "g", {0: 2})

        url = f"{admin_url(gateway)}/admin/v2/topics/{t}/watermarks"
        async def positions_settled() -> object:
            body = (await get(url))[1]
            return body if [s["offsets"] for s in body["subscriptions"]] == [{"0": 3, "1": 3}] else None

        body = await eventually(positions_settled)
        assert body["watermark_ms"] == 1000
        assert [(p["partition"], p["watermark_ms"], p["producers"], p["last_stable_offset"])
                for p in body["partitions"]] == [(0, 1000, {"a": 1000}, 5), (1, 1000, {"a": 1000}, 3)]
        assert body["subscriptions"] == [{"name": "s", "watermark_ms": 400, "offsets": {"0": 3, "1": 3}}]
        assert body["groups"] == [{"name": "g", "watermark_ms": 1000, "offsets": {"0": 2}}]

        cli = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "gateway", "admin", "--admin-url", admin_url(gateway), "topics", "watermarks", t],
            capture_output=True, text=True, timeout=60,
        )
        assert cli.returncode == 0, cli.stderr
        assert json.loads(cli.stdout)["subscriptions"] == body["subscriptions"]

        _, metrics = await get(admin_url(gateway) + "/metrics")
        assert f'gateway_watermark_ms{{partition="1",topic="{t}"}} 1000.0' in metrics
        assert f'gateway_watermark_producers{{partition="0",topic="{t}"}} 1.0' in metrics
        assert f'gateway_subscription_watermark_ms{{subscription="s",topic="{t}"}} 400.0' in metrics
        assert "gateway_watermark_index_entries_read_total" in metrics

        status, missing = await get(f"{admin_url(gateway)}/admin/v2/topics/nope/watermarks")
        assert status == 404 and missing["error"] == "TOPIC_NOT_FOUND"


@pytest.mark.slow
async def test_watermarks_and_snapshots_survive_a_killed_gateway(gateway_process):
    gateway_process.start()
    async with await Client.connect(gateway_process.native_url, reconnect=False) as client:
        a = await client.create_producer("wm-kill", "a", batching=False)
        b = await client.create_producer("wm-kill", "b", batching=False)
        await b.send_watermark(50)
        for i in range(300):  # past two of the default snapshots' budget of 128 markers
            await a.send_watermark(1000 + i)
        await b.send(b"late", event_time=10)
        consumer = await client.subscribe("wm-kill", "s", initial_position="latest")
        assert consumer.last_watermark == 50
        gateway_process.kill()
    gateway_process.start()
    async with await Client.connect(gateway_process.native_url) as client:
        assert await client.watermark("wm-kill", {0: 1 << 40}) == 50
        assert await client.watermark("wm-kill", {0: 200}) == 50
        consumer = await client.subscribe("wm-kill", "s")
        assert consumer.last_watermark == 50
        _, body = await get(f"{gateway_process.admin_url}/admin/v2/topics/wm-kill/watermarks")
        (p0,) = body["partitions"]
        assert p0["producers"] == {"a": 1299, "b": 50}
        assert p0["index_entries_read"] <= 129  # the latest snapshot and the markers since, of 301
