"""Watermarks on the admin face: per partition, per subscription and per Kafka consumer group over
HTTP, the CLI and Prometheus; producers that went away taken out of the set, by an operator or by a
topic's idle timeout; and what survives a gateway killed with SIGKILL."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import aiohttp
import confluent_kafka as ck
import pytest

from gateway.client import Client
from gateway.errors import InvalidConfig
from gateway.server.gateway import Gateway
from tests.conftest import admin_url, eventually, kafka_bootstrap, native_url, test_config

END = 1 << 50  # past any high watermark


async def get(url: str) -> tuple[int, object]:
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        return r.status, (await r.json() if r.content_type == "application/json" else await r.text())


async def cli(gw: Gateway, *args: str) -> object:
    """`gateway admin ...` against the gateway, as an operator runs it; its JSON output."""
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "gateway", "admin", "--admin-url", admin_url(gw), *args],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


CRASHING_PRODUCER = """
import asyncio, os, signal, sys
from gateway.client import Client

async def main():
    client = await Client.connect(sys.argv[1])
    for topic in sys.argv[2:]:
        producer = await client.create_producer(topic, "crashed")
        await producer.send_watermark(500)
    os.kill(os.getpid(), signal.SIGKILL)  # gone without a W_IDLE

asyncio.run(main())
"""


async def crash_after_a_watermark(gw: Gateway, *topics: str) -> None:
    """Producer "crashed" sends W_SET(500) to each topic from another process, which then dies."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CRASHING_PRODUCER, native_url(gw), *topics)
    assert await asyncio.wait_for(proc.wait(), 60) == -9



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

        assert (await cli(gateway, "topics", "watermarks", t))["subscriptions"] == body["subscriptions"]

        _, metrics = await get(admin_url(gateway) + "/metrics")
        assert f'gateway_watermark_ms{{partition="1",topic="{t}"}} 1000.0' in metrics
        assert f'gateway_watermark_producers{{partition="0",topic="{t}"}} 1.0' in metrics
        assert f'gateway_subscription_watermark_ms{{subscription="s",topic="{t}"}} 400.0' in metrics
        assert "gateway_watermark_index_entries_read_total" in metrics

        status, missing = await get(f"{admin_url(gateway)}/admin/v2/topics/nope/watermarks")
        assert status == 404 and missing["error"] == "TOPIC_NOT_FOUND"


async def test_an_operator_takes_a_crashed_producer_out_of_the_set(gateway):
    t = "wm-crashed"
    await gateway.services.log.create_topic(t, 2)
    async with await Client.connect(native_url(gateway)) as client:
        live = await client.create_producer(t, "live", batching=False)
        await live.send_watermark(1000)
        await crash_after_a_watermark(gateway, t)
        consumer = await client.subscribe(t, "s", initial_position="earliest")
        assert await client.watermark(t, dict.fromkeys(range(2), END)) == 500  # held back for good

        url = f"{admin_url(gateway)}/admin/v2/topics/{t}/watermarks/crashed/idle"
        async with aiohttp.ClientSession() as http, http.post(url) as r:
            assert r.status == 200
            done = await r.json()
        assert done["was_in_set"] is True and done["producer"] == "crashed"
        idle_at = {int(p): o for p, o in done["offsets"].items()}
        assert sorted(idle_at) == [0, 1]
        assert await client.watermark(t, dict.fromkeys(range(2), END)) == 1000
        assert await client.watermark(t, idle_at) == 500  # in the log: before its W_IDLE, as it was
        await eventually(lambda: consumer.last_watermark == 1000, what="the subscription passing the W_IDLE")

        again = await cli(gateway, "topics", "mark-idle", t, "crashed")
        assert again == {"topic": t, "producer": "crashed", "was_in_set": False, "offsets": {}}
        async with aiohttp.ClientSession() as http, http.post(url.replace(t, "nope")) as r:
            assert r.status == 404 and (await r.json())["error"] == "TOPIC_NOT_FOUND"


async def test_producers_silent_past_the_idle_timeout_are_marked_idle(redis_url):
    """`watermark.idle.timeout.ms` on a topic: the snapshot pass (the background role's step, called
    here directly) marks idle a producer whose latest watermark is older; topics without it wait."""
    gw = Gateway(test_config(redis_url, watermark_snapshot_interval=3600))  # no pass but ours
    await gw.start()
    try:
        log, wm = gw.services.log, gw.services.watermark
        with pytest.raises(InvalidConfig):
            await log.create_topic("wm-bad", 1, {"watermark.idle.timeout.ms": "soon"})
        await log.create_topic("wm-timeout", 2, {"watermark.idle.timeout.ms": "1000"})
        await log.create_topic("wm-forever", 1)
        with pytest.raises(InvalidConfig):
            await log.alter_config("wm-forever", {"watermark.idle.timeout.ms": "-5"})
        async with await Client.connect(native_url(gw)) as client:
            live = await client.create_producer("wm-timeout", "live", batching=False)
            await live.send_watermark(1000)
            await crash_after_a_watermark(gw, "wm-timeout", "wm-forever")
            await wm.snapshot_pass()
            assert await client.watermark("wm-timeout", {0: END, 1: END}) == 500  # not silent long enough

            await asyncio.sleep(1.1)  # the time the timeout is about
            await live.send_watermark(1000)  # the live producer speaks up; the crashed one cannot
            ends = [p.high_watermark for p in await client.list_partitions("wm-timeout")]
            await wm.snapshot_pass()
            assert await client.watermark("wm-timeout", {0: END, 1: END}) == 1000
            assert await client.watermark("wm-forever", {0: END}) == 500
            (p0, p1) = await wm.partitions("wm-timeout")
            assert (p0.producers, p1.producers) == ({"live": 1000}, {"live": 1000})
            assert [p0.offset, p1.offset] == [e + 1 for e in ends]  # one W_IDLE each

            await wm.snapshot_pass()  # nothing more to do
            assert [p.high_watermark for p in await client.list_partitions("wm-timeout")] == [e + 1 for e in ends]
    finally:
        await gw.stop()


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
