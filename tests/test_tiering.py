"""Tiered storage (KIP-405): copy, trim, seamless reads, retention, stop points, a store away."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import confluent_kafka as ck
import pytest

from gateway import telemetry
from gateway.client import Client
from gateway.domain.tiering import TierCopier, copy_due
from gateway.errors import InvalidConfig, StorageUnavailable
from gateway.formats.records import build_batch, iter_records
from gateway.formats.segment import build, parse_index, split
from gateway.server.gateway import Gateway
from gateway.store import keys
from gateway.store.connection import RedisClient
from tests.conftest import (
    GatewayProcess,
    admin_url,
    eventually,
    kafka_bootstrap,
    native_url,
    running_gateway,
    test_config,
)
from tests.kafka_clients import Stored, consume, create_topic, produce
from tests.kafka_jvm import java, tools
from tests.test_kafka_share import SETTINGS as SHARE_SETTINGS
from tests.test_kafka_share import group_configs, poll_values, share_consumer, values

pytestmark = pytest.mark.kafka

TIMEOUT = 30
TIERED = {"remote.storage.enable": "true", "segment.bytes": "1048576", "local.retention.bytes": "0"}
VALUE = b"v" * 1000


def test_a_segment_index_finds_every_batch_and_its_bytes() -> None:
    batches = [(0, 3, 10, b"\0" * 8 + b"a" * 92), (3, 2, 12, b"\0" * 8 + b"b" * 42), (5, 1, 12, b"\0" * 8 + b"c")]
    parts, raw = build(batches, [(7, 3, 4)])
    data = b"".join(parts)
    idx = parse_index(raw)
    assert (idx.bases, idx.counts, idx.positions, idx.aborted) == ([0, 3, 5], [3, 2, 1], [0, 100, 150, 159], [(7, 3, 4)])
    assert [idx.holding(o) for o in (0, 2, 3, 5, 6)] == [0, 0, 1, 2, 3]
    assert idx.span(1, 8, 1 << 20) == (1, 3) and idx.span(0, 8, 120) == (0, 1)
    assert idx.first_reaching(11) == 1 and idx.first_reaching(13) == 3
    got = split(idx, 1, 3, data[100:159])
    assert [(b, n, len(x)) for b, n, x in got] == [(3, 2, 50), (5, 1, 9)]
    assert got[0][2][:8] == (3).to_bytes(8, "big")  # base offsets patched in: a Kafka log segment


def test_copy_lag_is_kafkas_either_or() -> None:
    """RLMCopyTask.isEligibleForUpload: either lag at 0 copies at once; else either lag that applies."""
    assert copy_due(0, 5000, 1, 1) and copy_due(5000, 0, 1, 1)
    assert copy_due(1000, 5000, 1000, 1) and copy_due(1000, 5000, 1, 5000) and copy_due(1000, 5000, -3, 1)
    assert not copy_due(1000, 5000, 999, 4999)
    assert copy_due(-1, 5000, 1, 5000) and not copy_due(-1, -1, 10**9, 10**9)  # none applies: never


@pytest.fixture
async def tiered(redis_url: str, tmp_path: Path) -> AsyncIterator[Gateway]:
    """A gateway tiering into a directory; its role waits an hour: the tests run the passes."""
    async with running_gateway(test_config(redis_url, tier_store=str(tmp_path / "tier"), tier_interval=3600)) as gw:
        yield gw


def _copier(gw: Gateway) -> TierCopier:
    assert gw.tiering is not None
    return gw.tiering


async def test_kafkas_rules_for_remote_storage_configs(gateway: Gateway, tiered: Gateway) -> None:
    """LogConfig.validateTopicLogConfigValues of Kafka 4.4, word for word."""
    with pytest.raises(InvalidConfig, match="^Tiered Storage functionality is disabled in the broker. Topic cannot "
                                            "be configured with remote log storage.$"):
        await gateway.services.log.create_topic("t", 1, {"remote.storage.enable": "true"})
    logs = tiered.services.log
    only_delete = "^Remote log storage only supports topics with cleanup.policy=delete or cleanup.policy being an empty list.$"
    with pytest.raises(InvalidConfig, match=only_delete):
        await logs.create_topic("c", 1, {"remote.storage.enable": "true", "cleanup.policy": "compact,delete"})
    with pytest.raises(InvalidConfig, match="^When `remote.log.copy.disable` is set to true, the `local.retention.ms` "
                                            "and `retention.ms` must be set to the identical value"):
        await logs.create_topic("d", 1, {"remote.storage.enable": "true", "remote.log.copy.disable": "true",
                                         "local.retention.ms": "1000"})
    with pytest.raises(InvalidConfig, match="^Invalid value 2000 for configuration local.retention.bytes: Value must "
                                            "not be more than retention.bytes property value: 1000$"):
        await logs.create_topic("b", 1, {"remote.storage.enable": "true", "retention.bytes": "1000",
                                         "local.retention.bytes": "2000"})
    with pytest.raises(InvalidConfig, match="^Invalid value -1 for configuration local.retention.ms: Value must not "
                                            "be -1 as retention.ms value is set as 604800000.$"):
        await logs.create_topic("m", 1, {"remote.storage.enable": "true", "local.retention.ms": "-1"})
    with pytest.raises(InvalidConfig, match="^Invalid value 5000 for configuration remote.copy.lag.bytes: Value must "
                                            "not exceed local.retention.bytes \\(effective value: 4000\\)$"):
        await logs.create_topic("l", 1, {"remote.storage.enable": "true", "local.retention.bytes": "4000",
                                         "remote.copy.lag.bytes": "5000"})
    await logs.create_topic("t", 1, {"remote.storage.enable": "true"})
    with pytest.raises(InvalidConfig, match=only_delete):
        await logs.alter_config("t", {"cleanup.policy": "compact"})
    await logs.alter_config("t", {"cleanup.policy": ""})  # an empty policy keeps everything: tiered too
    with pytest.raises(InvalidConfig, match="^It is invalid to disable remote storage without deleting remote data"):
        await logs.alter_config("t", {"remote.storage.enable": "false"})
    await logs.alter_config("t", {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    switch = [await asyncio.to_thread(_broker_config, kafka_bootstrap(gw), gw.config.node_id,
                                      "remote.log.storage.system.enable") for gw in (gateway, tiered)]
    assert switch == ["false", "true"]  # Kafka's broker-level switch, as DescribeConfigs lists it


def _broker_config(bs: str, node: int, name: str) -> str:
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bs})  # alive until the answer: its handle serves it
    resource = ConfigResource(ResourceType.BROKER, str(node))
    return str(admin.describe_configs([resource])[resource].result(TIMEOUT)[name].value)


async def _fill(bs: str, topic: str, n: int) -> list[Stored]:
    """`n` 1 KB records, a transaction aborted in their middle; returns the committed ones as stored."""
    first = [(b"k%d" % i, VALUE + b"%d" % i) for i in range(n // 2)]
    placed = await produce("confluent", bs, topic, first, **{"batch.num.messages": 50})

    def aborted() -> None:
        p = ck.Producer({"bootstrap.servers": bs, "transactional.id": "tx"})
        p.init_transactions(TIMEOUT)
        p.begin_transaction()
        for i in range(120):
            p.produce(topic, value=b"aborted%d" % i)
        p.flush(TIMEOUT)
        p.abort_transaction(TIMEOUT)

    await asyncio.to_thread(aborted)
    second = [(b"k%d" % i, VALUE + b"%d" % i) for i in range(n // 2, n)]
    placed += await produce("confluent", bs, topic, second, **{"batch.num.messages": 50})
    return [(p, o, k, v) for (p, o), (k, v) in zip(placed, first + second, strict=True)]


async def test_a_tiered_topic_reads_back_whole_from_anywhere(tiered: Gateway, raw_redis: RedisClient,
                                                             tmp_path: Path) -> None:
    """Copied, listed, trimmed from Redis; confluent-kafka and kafka-python read it from the start, from
    the middle of a remote segment and across the remote/local boundary; READ_COMMITTED skips the
    transaction aborted in a remote segment; ListOffsets by time and -4/-5 answer from the boundaries."""
    bs, logs = kafka_bootstrap(tiered), tiered.services.log
    await logs.create_topic("cold", 1, TIERED)
    stored = await _fill(bs, "cold", 4000)
    copied = await _copier(tiered).tier_pass()
    segments = await tiered.store.tier.segments("cold", 0) if tiered.store else []
    assert copied > 3_000_000 and len(segments) == 3, (copied, segments)
    local_start, highest = await logs.tier_bounds("cold", 0)
    assert local_start == segments[-1].next_offset == highest + 1
    assert await logs.bounds("cold", 0) == (0, stored[-1][1] + 1)
    first_local = int((await raw_redis.xrange(keys.log("cold", 0), count=1))[0][0].split(b"-")[0])
    assert first_local == local_start  # what is tiered has left Redis
    assert len(list((tmp_path / "tier").rglob("*.log"))) == 3
    await logs.create_topic("gone", 1, TIERED)
    await produce("confluent", bs, "gone", [(None, VALUE)] * 1100, **{"batch.num.messages": 50})
    assert await _copier(tiered).tier_pass() > 0 and len(list((tmp_path / "tier").rglob("*.log"))) == 4
    await logs.delete_topic("gone")  # its segments go with it
    assert len(list((tmp_path / "tier").rglob("*.log"))) == 3
    gets, ahead = telemetry.TIER.remote_fetches, telemetry.TIER.read_ahead_hits
    everything = await consume("confluent", bs, "cold", 0, 0, len(stored) + 120,
                               **{"isolation.level": "read_uncommitted"})
    assert telemetry.TIER.remote_fetches - gets == 3 and telemetry.TIER.read_ahead_hits > ahead  # a GET a segment
    assert [s for s in everything if not s[3].startswith(b"aborted")] == stored
    assert len(everything) == len(stored) + 120  # read_uncommitted sees the aborted transaction
    assert await consume("confluent", bs, "cold", 0, 0, len(stored), **{"isolation.level": "read_committed"}) == stored
    committed = await consume("kafka-python", bs, "cold", 0, 0, len(stored), isolation_level="read_committed")
    assert committed[:len(stored)] == stored
    aborted_at = next(s[1] for s in everything if s[3].startswith(b"aborted"))
    assert aborted_at < local_start  # the aborted transaction is in a remote segment
    middle = segments[1].base_offset + 7
    assert (await consume("kafka-python", bs, "cold", 0, middle, 5))[0][1] == middle
    across = await consume("kafka-python", bs, "cold", 0, local_start - 3, 6)
    assert [s[1] for s in across][:6] == list(range(local_start - 3, local_start + 3))
    held = (await logs.read("cold", 0, middle, 1)).entries[0]
    ts = next(r.timestamp for r in iter_records(held.batch, held.base_offset) if r.offset == middle)
    found = await logs.offset_for_time("cold", 0, ts)  # ListOffsets by time, answered from a segment's index
    assert found is not None and found[0] <= middle and found[1] == ts
    async with aiohttp.ClientSession() as http, http.get(f"{admin_url(tiered)}/admin/v2/topics/cold") as resp:
        view = (await resp.json())["partitions"][0]["tier"]
    assert (view["local_log_start_offset"], view["highest_tiered_offset"], view["remote_segments"]) == (
        local_start, highest, 3)
    assert view["remote_bytes"] == copied and 0 < view["local_bytes"] < 1_100_000
    assert telemetry.TIER.copy_lag_bytes["cold"] == view["local_bytes"]  # Redis holds only what is not copied
    async with aiohttp.ClientSession() as http, http.get(f"{admin_url(tiered)}/metrics") as resp:
        metrics = await resp.text()
    assert "gateway_tier_remote_fetch_bytes_total" in metrics and "gateway_tier_segments_copied_total" in metrics
    fetches = re.search(r"^gateway_tier_remote_fetches_total (\S+)$", metrics, re.M)
    timed = re.search(r'^gateway_tier_remote_fetch_seconds_bucket\{le="\+Inf"\} (\S+)$', metrics, re.M)
    assert fetches and timed and float(timed[1]) == float(fetches[1]) > 0  # each remote read timed once
    async with await Client.connect(native_url(tiered)) as native:  # the native range read, below the local start too
        ranged = [m.value async for m in native.read_range("cold", 0, middle, middle + 3)]
        assert ranged == [s[3] for s in everything[middle:middle + 3]]
        for mode in ("exclusive", "shared"):  # a subscription from 0; a share group reads through a shared one
            consumer = await native.subscribe("cold", mode, mode, initial_position="earliest")
            received = [await consumer.receive() for _ in range(5)]
            assert sorted((m.offset, m.value) for m in received) == [(s[1], s[3]) for s in stored[:5]]


async def test_retention_and_delete_records_unlist_then_delete_segments(tiered: Gateway, tmp_path: Path) -> None:
    bs, logs = kafka_bootstrap(tiered), tiered.services.log
    await logs.create_topic("old", 1, {**TIERED, "retention.bytes": "2500000"})
    stored = await produce("confluent", bs, "old", [(None, VALUE)] * 4000, **{"batch.num.messages": 50})
    await _copier(tiered).tier_pass()
    assert tiered.store is not None
    before = await tiered.store.tier.segments("old", 0)
    await logs.enforce_retention()
    after = await tiered.store.tier.segments("old", 0)
    start, _ = await logs.bounds("old", 0)
    assert len(after) < len(before) and start == after[0].base_offset, (before, after)
    assert len(list((tmp_path / "tier").rglob("*.log"))) == len(after)
    assert (await consume("confluent", bs, "old", 0, start, 3))[0][1] == start
    cut = after[0].next_offset + 5
    assert await logs.delete_records("old", 0, cut) == cut
    assert [s.base_offset for s in await tiered.store.tier.segments("old", 0)] == [s.base_offset for s in after[1:]]
    assert len(list((tmp_path / "tier").rglob("*.log"))) == len(after) - 1
    assert (await consume("kafka-python", bs, "old", 0, cut, 2))[0][1] == cut
    assert stored[-1][1] + 1 == (await logs.bounds("old", 0))[1]
    local_start, _ = await logs.tier_bounds("old", 0)
    await logs.alter_config("old", {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    await _copier(tiered).tier_pass()  # the tiered data goes, the log starts where Redis's part does
    assert await tiered.store.tier.segments("old", 0) == [] and not list((tmp_path / "tier").rglob("*.*"))
    assert await logs.bounds("old", 0) == (local_start, stored[-1][1] + 1)
    assert (await consume("confluent", bs, "old", 0, local_start, 1))[0][1] == local_start
    await logs.alter_config("old", {"retention.ms": "1"})  # by time: every batch is past it
    await logs.enforce_retention()
    assert await logs.bounds("old", 0) == (stored[-1][1] + 1, stored[-1][1] + 1)


async def test_a_copy_waits_for_newer_bytes_as_remote_copy_lag_bytes_says(tiered: Gateway) -> None:
    bs, logs = kafka_bootstrap(tiered), tiered.services.log
    await logs.create_topic("lag", 1, {**TIERED, "local.retention.bytes": "-2", "remote.copy.lag.ms": "3600000",
                                       "remote.copy.lag.bytes": "2000000"})
    await produce("confluent", bs, "lag", [(None, VALUE)] * 3200, **{"batch.num.messages": 50})
    await _copier(tiered).tier_pass()
    assert tiered.store is not None
    [segment] = await tiered.store.tier.segments("lag", 0)  # the next has under 2 MB after it, and is recent
    assert segment.base_offset == 0


async def test_retention_by_time_deletes_expired_segments_first(tiered: Gateway, tmp_path: Path) -> None:
    bs, logs = kafka_bootstrap(tiered), tiered.services.log
    await logs.create_topic("aged", 1, {**TIERED, "local.retention.bytes": "-2"})
    old = await produce("confluent", bs, "aged", [(None, VALUE)] * 1100,
                        **{"batch.num.messages": 50})
    assert tiered.store is not None
    await _copier(tiered).tier_pass()
    [segment] = await tiered.store.tier.segments("aged", 0)
    assert (await logs.tier_bounds("aged", 0))[0] == 0  # local retention follows retention.*: nothing trimmed
    await logs.alter_config("aged", {"retention.ms": "1"})
    await logs.enforce_retention()
    assert await tiered.store.tier.segments("aged", 0) == [] and not list((tmp_path / "tier").rglob("*.log"))
    assert await logs.bounds("aged", 0) == (old[-1][1] + 1, old[-1][1] + 1)
    assert segment.next_offset <= old[-1][1] + 1


async def test_the_store_away_fails_remote_reads_retriably_and_nothing_else(tiered: Gateway, tmp_path: Path) -> None:
    bs, logs = kafka_bootstrap(tiered), tiered.services.log
    await logs.create_topic("away", 1, TIERED)
    await produce("confluent", bs, "away", [(None, VALUE)] * 1500, **{"batch.num.messages": 50})
    await _copier(tiered).tier_pass()
    local_start, _ = await logs.tier_bounds("away", 0)
    assert local_start > 0
    (tmp_path / "tier").rename(tmp_path / "unmounted")
    with pytest.raises(StorageUnavailable, match="tiered storage is unavailable"):
        await logs.read("away", 0, 0, 4)
    [(_, offset)] = await produce("confluent", bs, "away", [(None, b"still")])
    assert (await consume("confluent", bs, "away", 0, offset, 1))[0][3] == b"still"
    assert await _copier(tiered).tier_pass() == 0  # the pass stops; the next one tries again
    failed = telemetry.TIER.remote_errors
    reading = asyncio.create_task(consume("confluent", bs, "away", 0, 0, 1501))  # fails on any consume error
    await eventually(lambda: telemetry.TIER.remote_errors > failed, TIMEOUT, "a Kafka fetch of the store away")
    (tmp_path / "unmounted").rename(tmp_path / "tier")
    assert [s[1] for s in await reading][:1501] == list(range(1501))  # KAFKA_STORAGE_ERROR was retried
    assert len(await consume("kafka-python", bs, "away", 0, 0, 1501)) == 1501
    assert tiered.store is not None
    first = (await tiered.store.tier.segments("away", 0))[0]
    (tmp_path / "tier").rename(tmp_path / "unmounted")
    assert await logs.delete_records("away", 0, first.next_offset) == first.next_offset  # unlisted, store away
    (tmp_path / "unmounted").rename(tmp_path / "tier")
    assert await _copier(tiered).sweep_orphans() == 2  # the segment's data and index, orphans now


@pytest.mark.parametrize("point", ["copied", "listed", "trimmed"])
async def test_a_gateway_killed_mid_copy_loses_nothing_and_lists_nothing_twice(
    point: str, redis_url: str, raw_redis: RedisClient, tmp_path: Path
) -> None:
    """SIGKILL at each step (`debug_tier_stop_at`): a segment's objects written but not listed, listed but
    the stream not trimmed, trimmed. Readers see every record; the next pass deletes the orphans and
    goes on, no segment listed twice."""
    tier = tmp_path / "tier"
    cfg = test_config(redis_url, tier_store=str(tier), tier_interval=3600)
    async with running_gateway(cfg) as gw:
        await gw.services.log.create_topic("crash", 1, TIERED)
        placed = await produce("confluent", kafka_bootstrap(gw), "crash",
                               [(None, VALUE + b"%d" % i) for i in range(2500)], **{"batch.num.messages": 50})
    first = GatewayProcess(tmp_path / "one", redis_url=redis_url, args=[
        "--tier-store", str(tier), "--tier-interval", "0.05", "--lease-ms", "1500", "--debug-tier-stop-at", point])
    try:
        await asyncio.to_thread(first.start)
        await asyncio.wait_for(asyncio.to_thread(first.output_until, f"tiering stopped at {point}"), TIMEOUT)
    finally:
        first.kill()
    manifest = await raw_redis.zrange(keys.tier_manifest("crash", 0), 0, -1)
    objects = sorted(p.name for p in tier.rglob("*.*"))
    assert {"copied": not manifest and len(objects) == 2, "listed": len(manifest) == 1 and len(objects) == 2,
            "trimmed": len(manifest) == 2 and len(objects) == 4}[point], (manifest, objects)
    async with running_gateway(cfg) as gw:
        bs = kafka_bootstrap(gw)
        everything = await consume("confluent", bs, "crash", 0, 0, 2500)
        assert [s[1] for s in everything] == [o for _, o in placed]
        assert await _copier(gw).tier_pass() > 0 or point == "trimmed"
        manifest = await raw_redis.zrange(keys.tier_manifest("crash", 0), 0, -1)
        bases = [m.split(b":")[0] for m in manifest]
        assert len(manifest) == 2 and len(set(bases)) == 2
        assert len(list(tier.rglob("*.*"))) == 4  # the orphans of the killed copy are gone
        assert await consume("kafka-python", bs, "crash", 0, 0, 2500) == everything


@pytest.mark.slow
async def test_a_topic_ten_times_redis_memory_is_produced_and_read_back_whole(gateway_process: GatewayProcess) -> None:
    """`gateway serve` with an embedded Redis of 8 MB tiers into `<data-dir>/tier` by default: 80 MB
    produced (a full Redis refuses produce retriably until the copier makes room) and read back whole."""
    gateway_process.args = ["--redis-maxmemory", "8mb", "--tier-interval", "0.1"]
    await asyncio.to_thread(gateway_process.start)
    bs = gateway_process.kafka_bootstrap
    await create_topic(bs, "huge", **TIERED)
    n = 80_000
    placed = await produce("confluent", bs, "huge", [(None, VALUE)] * n,
                           **{"batch.num.messages": 100, "message.timeout.ms": 120_000, "enable.idempotence": True})
    assert [o for _, o in placed] == list(range(n))
    assert len(list((gateway_process.data_dir / "tier").rglob("*.log"))) > 60
    got = await consume("confluent", bs, "huge", 0, 0, n, **{"fetch.max.bytes": 4 << 20})
    assert [s[1] for s in got[:n]] == list(range(n)) and all(s[3] == VALUE for s in got)


@pytest.mark.parametrize("redis_url", ["single", "cluster"], indirect=True)
async def test_two_gateways_hand_copying_over(redis_url: str, raw_redis: RedisClient, tmp_path: Path) -> None:
    """One gateway at a time holds the tiering role; a clean stop hands it to the other, which copies
    on from where the manifest ends (on Redis Cluster too: every script is in the partition's slot)."""
    cfg = {"tier_store": str(tmp_path / "tier"), "tier_interval": 0.05, "lease_ms": 1500}
    a = Gateway(test_config(redis_url, **cfg))
    await a.start()

    async def listed(n: int) -> bool:
        return len(await raw_redis.zrange(keys.tier_manifest("shared", 0), 0, -1)) >= n

    try:
        async with running_gateway(test_config(redis_url, **cfg)) as b:
            await a.services.log.create_topic("shared", 1, TIERED)
            records = [(None, VALUE + b"%d" % i) for i in range(1100)]
            first = await produce("confluent", kafka_bootstrap(a), "shared", records, **{"batch.num.messages": 50})
            await eventually(lambda: listed(1), TIMEOUT, "the first holder's copy")
            holders = [gw for gw in (a, b) if any(r.holding for r in gw.services.roles.roles if r.name == "tiering")]
            assert len(holders) == 1
            other = b if holders[0] is a else a
            await holders[0].stop()  # a clean stop hands the role on at once
            second = await produce("confluent", kafka_bootstrap(other), "shared", records, **{"batch.num.messages": 50})
            await eventually(lambda: listed(2), TIMEOUT, "the second holder's copy")
            manifest = await raw_redis.zrange(keys.tier_manifest("shared", 0), 0, -1)
            ends = [tuple(map(int, m.split(b":")[:2])) for m in manifest]
            assert all(prev[1] == nxt[0] for prev, nxt in zip(ends, ends[1:], strict=False))  # contiguous, once
            got = await consume("confluent", kafka_bootstrap(other), "shared", 0, 0, 2200)
            assert [s[1] for s in got][:2200] == [o for _, o in first + second]
    finally:
        await a.stop()


@pytest.mark.jvm
async def test_kafkas_java_tools_find_the_tiered_boundaries_and_read_it_all(tiered: Gateway) -> None:
    """kafka-get-offsets (Kafka's Java admin client: ListOffsets v9) with earliest-local and latest-tiered,
    and Kafka's Java consumer (kafka-consumer-perf-test) reading the topic from its first, tiered, record."""
    bs, logs = kafka_bootstrap(tiered), tiered.services.log
    await logs.create_topic("edges", 1, TIERED)
    await produce("confluent", bs, "edges", [(None, VALUE)] * 1500, **{"batch.num.messages": 50})
    await _copier(tiered).tier_pass()
    local_start, highest = await logs.tier_bounds("edges", 0)
    assert local_start == highest + 1 > 0
    b = ["--bootstrap-server", bs, "--topic", "edges"]
    runs = await tools(["kafka-get-offsets", *b, "--time", "-2"], ["kafka-get-offsets", *b, "--time", "-4"],
                       ["kafka-get-offsets", *b, "--time", "-5"], ["kafka-get-offsets", *b, "--time", "-1"],
                       ["kafka-consumer-perf-test", *b, "--num-records", "1500", "--group", "perf"])
    assert [r.out.strip() for r in runs[:4]] == ["edges:0:0", f"edges:0:{local_start}", f"edges:0:{highest}",
                                                 "edges:0:1500"]
    assert runs[4].out.strip().splitlines()[-1].split(", ")[4] == "1500"  # the Java consumer read it all, from 0


@pytest.mark.jvm
async def test_kafkas_java_consumer_reads_a_tiered_topic_from_anywhere(tiered: Gateway) -> None:
    """Kafka's Java consumer (tests/jvm Consume) reads what confluent-kafka and kafka-python read above:
    from the start (read_uncommitted: the aborted records at their offsets), from the middle of the
    first remote segment (read_committed: the transaction aborted in a remote segment skipped) and
    from just before the remote/local boundary, each to the end."""
    bs, logs = kafka_bootstrap(tiered), tiered.services.log
    await logs.create_topic("javacold", 1, TIERED)
    stored = await _fill(bs, "javacold", 2500)
    await _copier(tiered).tier_pass()
    segments = await tiered.store.tier.segments("javacold", 0) if tiered.store else []
    local_start, _ = await logs.tier_bounds("javacold", 0)
    assert len(segments) == 2 and local_start == segments[-1].next_offset, segments
    middle, across = segments[0].base_offset + 7, local_start - 3
    committed = [f"0 {o} {v.decode()}" for _, o, _, v in stored]
    aborted_at = next(o for (_, o, _, _), (_, n, _, _) in zip(stored, stored[1:], strict=False) if n > o + 1) + 1
    assert middle < aborted_at < local_start  # the aborted transaction is in a remote segment, after `middle`
    runs = await asyncio.gather(
        java("gateway.jvm.Consume", bs, "javacold", "0", "isolation.level=read_uncommitted"),
        java("gateway.jvm.Consume", bs, "javacold", f"@{middle}", "isolation.level=read_committed"),
        java("gateway.jvm.Consume", bs, "javacold", f"@{across}", "isolation.level=read_committed"))
    everything, from_middle, from_across = (r.lines() for r in runs)
    assert [line for line in everything if " aborted" not in line] == committed
    assert [line.split()[1] for line in everything if " aborted" in line] == [
        str(o) for o in range(aborted_at, aborted_at + 120)]
    assert from_middle == [line for line in committed if int(line.split()[1]) >= middle]
    assert from_across == [line for line in committed if int(line.split()[1]) >= across]
    assert from_across[0].split()[1] == str(across) and across < local_start < int(from_across[-1].split()[1])


def test_a_tier_store_that_cannot_be_opened_stops_the_gateway_with_one_line(gateway_process: GatewayProcess) -> None:
    gateway_process.args = ["--tier-store", "/proc/no-such-dir/tier"]
    with pytest.raises(RuntimeError) as failed:
        gateway_process.start()
    output = str(failed.value).split("\n", 1)[1].strip()
    assert output == ("gateway: cannot create the tier directory /proc/no-such-dir/tier: No such file or directory: "
                      "check --tier-store (GATEWAY_TIER_STORE)")


async def test_a_share_group_reads_a_tiered_topic_from_its_start(redis_url: str, tmp_path: Path) -> None:
    """confluent-kafka's ShareConsumer (KIP-932) with share.auto.offset.reset=earliest gets every record,
    the tiered ones included, through the native shared subscription the group reads by."""
    cfg = test_config(redis_url, tier_store=str(tmp_path / "tier"), tier_interval=3600, **SHARE_SETTINGS)
    async with running_gateway(cfg) as gw:
        bs = kafka_bootstrap(gw)
        await gw.services.log.create_topic("queue", 1, TIERED)
        await produce("confluent", bs, "queue", [(None, b"%d" % i + VALUE) for i in range(1500)],
                      **{"batch.num.messages": 50})
        await _copier(gw).tier_pass()
        assert (await gw.services.log.tier_bounds("queue", 0))[0] > 0
        await group_configs(bs, "workers", share_auto_offset_reset="earliest")
        wanted = {b"%d" % i + VALUE for i in range(1500)}
        got: list[ck.Message] = []

        def read_all() -> None:
            consumer = share_consumer(bs, "workers", topic="queue")
            try:
                poll_values(consumer, got, wanted)
            finally:
                consumer.close()

        await asyncio.to_thread(read_all)
        assert set(values(got)) == wanted


async def test_every_partition_is_tiered_two_at_a_time(tiered: Gateway) -> None:
    logs = tiered.services.log
    await logs.create_topic("wide", 3, TIERED)
    batch = build_batch([(None, VALUE, [])] * 400)  # about 400 KB: two fit in a 1 MB segment, a third does not
    for p in range(3):
        assert all(not isinstance(r.result, Exception) for r in await logs.append([("wide", p, batch)] * 3))
    await _copier(tiered).tier_pass()
    assert tiered.store is not None
    for p in range(3):
        [segment] = await tiered.store.tier.segments("wide", p)
        assert (segment.base_offset, segment.next_offset) == (0, 800)
        assert await logs.tier_bounds("wide", p) == (800, 799)
