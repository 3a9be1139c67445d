"""`gateway bench --read-mark`: what a read's replica mark costs (`--records` reads, default 2,000).

One run, four ways, each on a partition of 20 small batches read from offset 0 at once (as a Fetch
reads): a primary with a replica (Sentinel's shape) without a mark and with its PUBLISH + WAIT, and a
Redis Cluster with a replica per primary without a mark and with read-mark-1.lua + WAIT. Per read:
Redis's CPU (the reading node's used_cpu_user + used_cpu_sys), the time its commands ran
(INFO commandstats), and the store read's latency (p50, p99) as the gateway's Fetch sees it."""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis as redis_sync

from gateway.formats.records import build_batch, parse_header
from gateway.store import Store, keys
from gateway.store.embedded import EmbeddedCluster, EmbeddedRedis
from gateway.store.log import AppendRequest, TopicInfo

READS = 2_000


def _node_stats(port: int) -> tuple[float, float]:
    """(CPU seconds, commandstats µs) of the node so far."""
    with redis_sync.Redis(port=port) as r:
        cpu = r.info("cpu")
        stats = r.info("commandstats")
    return cpu["used_cpu_user"] + cpu["used_cpu_sys"], sum(float(v["usec"]) for v in stats.values())


def _linked(port: int) -> bool:
    with redis_sync.Redis(port=port) as r:
        slave = r.info("replication").get("slave0")
    return isinstance(slave, dict) and slave.get("state") == "online"


async def _measure(url: str, label: str, reads: int, marked: bool) -> dict[str, Any]:
    store = Store.open(url)
    try:
        topic = f"bench-{label.replace(' ', '-')}"
        await store.replication.redis.initialize()  # a cluster client's slots, learnt before a node is asked for
        await store.replication.learn()
        await store.log.create_topic(TopicInfo(topic, 1))
        store.replication.configure(2 if marked else 1, 5_000)
        for _ in range(20):
            batch = build_batch([(None, b"v" * 100, [])])
            h = parse_header(batch)
            await store.log.append([AppendRequest(topic, 0, batch, h.record_count, h.max_timestamp)])
        port = store.replication.connections.address(keys.log(topic, 0))[1]
        for _ in range(50):  # warm: connections opened, scripts loaded, replicas counted
            await store.log.read(topic, 0, 0, 20)
        cpu0, usec0 = _node_stats(port)
        took = []
        for _ in range(reads):
            start = time.perf_counter()
            sl = await store.log.read(topic, 0, 0, 20)
            took.append(time.perf_counter() - start)
            assert len(sl.entries) == 20
        cpu1, usec1 = _node_stats(port)
    finally:
        await store.close()
    took.sort()
    return {"label": label, "cpu_us": (cpu1 - cpu0) * 1e6 / reads, "cmd_us": (usec1 - usec0) / reads,
            "p50_us": statistics.median(took) * 1e6, "p99_us": took[int(len(took) * 0.99)] * 1e6}


async def _run(reads: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        primary = EmbeddedRedis(Path(tmp) / "primary")
        primary.start()
        replica = EmbeddedRedis(Path(tmp) / "replica", replica_of=primary.port)
        cluster = EmbeddedCluster(Path(tmp) / "cluster", replicas=1)
        try:
            replica.start()
            cluster.start()
            while not _linked(primary.port) or not all(_linked(n.port) for n in cluster.nodes[:3]):
                await asyncio.sleep(0.1)
            return [await _measure(primary.url, "sentinel none", reads, False),
                    await _measure(primary.url, "sentinel publish", reads, True),
                    await _measure(cluster.url, "cluster none", reads, False),
                    await _measure(cluster.url, "cluster script", reads, True)]
        finally:
            cluster.stop()
            replica.stop()
            primary.stop()


def measure_read_mark(reads: int) -> list[dict[str, Any]]:
    """The four rows: Sentinel's shape and a Cluster, each without and with the mark."""
    return asyncio.run(_run(reads))


def format_rows(rows: list[dict[str, Any]]) -> str:
    return "\n".join(f"{row['label']:18} redis cpu {row['cpu_us']:6.1f} µs/read  commands {row['cmd_us']:5.1f} µs/read  "
                     f"read p50 {row['p50_us']:6.0f} µs  p99 {row['p99_us']:6.0f} µs" for row in rows)
