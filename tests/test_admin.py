"""The admin HTTP API and the `gateway admin` CLI over it, against a whole gateway."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import aiohttp

from tests.conftest import admin_url


async def cli(gw, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process; run in a thread, as the gateway shares this event loop."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "gateway", "admin", "--admin-url", admin_url(gw), *args],
        capture_output=True, text=True, timeout=60,
    )


async def test_health_and_metrics(gateway):
    async with aiohttp.ClientSession() as http:
        async with http.get(admin_url(gateway) + "/health") as r:
            assert r.status == 200
            assert await r.json() == {"status": "ok", "redis": True}
        await gateway.services.log.create_topic("m", 2)
        async with http.get(admin_url(gateway) + "/metrics") as r:
            text = await r.text()
    assert 'gateway_partition_high_watermark{partition="1",topic="m"} 0.0' in text
    assert "gateway_topics 1.0" in text


async def test_topic_admin_over_http(gateway):
    base = admin_url(gateway) + "/admin/v2/topics"
    async with aiohttp.ClientSession() as http:
        async with http.post(base, json={"name": "orders", "partitions": 3,
                                         "config": {"retention.ms": "1000"}}) as r:
            assert r.status == 201
            made = await r.json()
        assert [p["high_watermark"] for p in made["partitions"]] == [0, 0, 0]
        assert made["config"]["retention.ms"] == "1000"
        async with http.post(base, json={"name": "orders", "partitions": 1}) as r:
            assert r.status == 409 and (await r.json())["error"] == "TOPIC_EXISTS"
        async with http.post(base, json={"name": "bad", "config": {"nope": "1"}}) as r:
            assert r.status == 400 and (await r.json())["error"] == "INVALID_CONFIG"
        async with http.post(base, data=b"{not json") as r:
            assert r.status == 400
        async with http.patch(base + "/orders/config", json={"retention.ms": None,
                                                               "max.message.bytes": "2048"}) as r:
            cfg = (await r.json())["config"]
        assert cfg["retention.ms"] == "604800000" and cfg["max.message.bytes"] == "2048"
        async with http.get(base) as r:
            assert await r.json() == [{"name": "orders", "partitions": 3}]
        async with http.delete(base + "/orders") as r:
            assert r.status == 200
        async with http.get(base + "/orders") as r:
            assert r.status == 404 and (await r.json())["error"] == "TOPIC_NOT_FOUND"


async def test_admin_cli(gateway):
    made = await cli(gateway, "topics", "create", "events", "--partitions", "2", "--config", "retention.bytes=4096")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["config"]["retention.bytes"] == "4096"
    listed = await cli(gateway, "topics", "list")
    assert json.loads(listed.stdout) == [{"name": "events", "partitions": 2}]
    described = json.loads((await cli(gateway, "topics", "describe", "events")).stdout)
    assert [p["partition"] for p in described["partitions"]] == [0, 1]
    altered = json.loads(
        (await cli(gateway, "topics", "alter-config", "events", "--config", "retention.bytes=")).stdout
    )
    assert altered["config"]["retention.bytes"] == "-1"
    assert (await cli(gateway, "topics", "delete", "events")).returncode == 0
    missing = await cli(gateway, "topics", "describe", "events")
    assert missing.returncode != 0 and "TOPIC_NOT_FOUND" in missing.stderr


def test_admin_cli_says_when_the_gateway_is_unreachable():
    from gateway.store.embedded import free_port

    r = subprocess.run([sys.executable, "-m", "gateway", "admin", "--admin-url",
                        f"http://127.0.0.1:{free_port()}", "topics", "list"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "cannot reach the gateway" in r.stderr


async def test_list_and_abort_a_hanging_transaction(gateway):
    tc = gateway.services.txn
    await gateway.services.log.create_topic("t", 2)
    txn = await tc.begin(timeout_ms=600_000)
    await tc.add_partitions(txn, [("t", 0), ("t", 1)])
    listed = json.loads((await cli(gateway, "transactions", "list")).stdout)
    assert [(x["txn"], x["state"]) for x in listed] == [(str(txn), "OPEN")]
    assert listed[0]["partitions"] == [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]
    assert listed[0]["age_ms"] >= 0 and listed[0]["timeout_ms"] == 600_000
    aborted = await cli(gateway, "transactions", "abort", str(txn))
    assert json.loads(aborted.stdout) == {"txn": str(txn), "state": "ABORTED"}
    assert json.loads((await cli(gateway, "transactions", "list")).stdout) == []
    described = json.loads((await cli(gateway, "transactions", "describe", str(txn))).stdout)
    assert described["state"] == "ABORTED"
    missing = await cli(gateway, "transactions", "abort", "0:999999")
    assert missing.returncode != 0 and "TRANSACTION_NOT_FOUND" in missing.stderr


async def test_transaction_keys_over_http_cli_and_metrics(gateway):
    fence = gateway.services.fence
    conn = await fence.connect("", "job-42")
    conn = await fence.connect("", "job-42")
    txn, _ = await fence.begin("", "job-42", conn.epoch, own_producer=True)
    listed = json.loads((await cli(gateway, "transactions", "list-transaction-keys")).stdout)
    assert [(k["key"], k["owner"], k["epoch"]) for k in listed] == [("job-42", "anonymous", 1)]
    got = json.loads((await cli(gateway, "transactions", "get-transaction-key", "job-42")).stdout)
    assert got["open_transaction"]["txn"] == str(txn) and got["age_ms"] >= 0
    async with aiohttp.ClientSession() as http:
        async with http.get(admin_url(gateway) + "/metrics") as r:
            text = await r.text()
    assert "gateway_transaction_keys 1.0" in text
    assert 'gateway_transaction_key_epoch{key="anonymous&job-42"} 1.0' in text
    assert 'gateway_transaction_key_age_seconds{key="anonymous&job-42"}' in text
    deleted = json.loads((await cli(gateway, "transactions", "delete-transaction-key", "job-42")).stdout)
    assert deleted == {"deleted": "anonymous&job-42", "aborted_txn": str(txn)}
    assert (await gateway.services.txn.describe(txn)).state == "ABORTED"
    missing = await cli(gateway, "transactions", "get-transaction-key", "job-42")
    assert missing.returncode != 0 and "TRANSACTION_NOT_FOUND" in missing.stderr


async def test_delayed_stats_over_http_and_metrics(gateway):
    from gateway.formats.records import BatchBuilder

    await gateway.services.log.create_topic("later", 2)
    b = BatchBuilder()
    b.append(b"wait for it")
    await gateway.services.delay.send("later", 1, b.build(), deliver_after_ms=600_000)
    async with aiohttp.ClientSession() as http:
        async with http.get(admin_url(gateway) + "/admin/v2/topics/later/delayed") as r:
            stats = await r.json()
        async with http.get(admin_url(gateway) + "/metrics") as r:
            text = await r.text()
    p0, p1 = stats["partitions"]
    assert p0["messages"] == 0 and p0["next_due_ms"] is None
    assert p1["messages"] == 1 and p1["buckets"] >= 1 and p1["next_due_ms"] > 0
    assert p1["index_bytes_per_message"] > 0 and p1["payload_bytes_per_message"] > 0
    assert 'gateway_delayed_messages{partition="1",topic="later"} 1.0' in text
