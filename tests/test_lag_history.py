"""Consumer groups' lag over time, kept in Redis by the lag sampler role: samples written in one pass
over every group (share groups too), bounded in count and age, served by the admin API, deleted
with the group, and sampled on by another gateway when the sampling one is SIGKILLed."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import confluent_kafka as ck
import confluent_kafka.admin
import pytest

from gateway.domain.groups.lag_history import LagHistory
from gateway.domain.services import Services
from gateway.store.lag_history import LagSample
from tests.conftest import (
    GatewayProcess,
    admin_url,
    eventually,
    flush,
    kafka_bootstrap,
    running_gateway,
    test_config,
)

pytestmark = pytest.mark.kafka

REDIS_BACKENDS = ("single", "cluster")


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """A group's committed offsets, as a consumer that assigns itself partitions commits them."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[ck.TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    c.close()


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap})
    for partition, n in counts.items():
        for i in range(n):
            p.produce(topic, partition=partition, value=b"v%d" % i)
    assert p.flush(30) == 0


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


async def test_a_pass_samples_every_group_and_the_history_is_capped_served_and_deleted(redis_url: str) -> None:
    async with running_gateway(test_config(redis_url, lag_sample_interval=3600)) as gw:
        svc: Services = gw.services
        boot = kafka_bootstrap(gw)
        await svc.log.create_topic("lagged", 2)
        await asyncio.to_thread(produce, boot, "lagged", {0: 5, 1: 3})
        for g, at in (("g1", {0: 1, 1: 3}), ("g2", {0: 5})):
            await asyncio.to_thread(commit, boot, g, "lagged", at)
        # AlterShareGroupOffsets: a share group starting at 1 on partition 1, at the earliest on 0
        await svc.share.alter_offsets("sharers", {"lagged": {1: 1}})
        history = LagHistory(svc.groups, svc.log, gw.store, max_points=3)
        assert await history.sample_pass() == 3
        [s3] = await history.read("sharers")  # the high watermark less its start offset, as Kafka's
        assert (s3.total, s3.partitions) == (7, {"lagged": [(0, 5), (1, 2)]})  # DescribeShareGroupOffsets v1
        [s1] = await history.read("g1")
        assert (s1.total, s1.partitions) == (4, {"lagged": [(0, 4), (1, 0)]})
        [s2] = await history.read("g2")
        assert (s2.total, s2.partitions) == (0, {"lagged": [(0, 0)]})
        await asyncio.to_thread(produce, boot, "lagged", {1: 2})
        for _ in range(3):
            await history.sample_pass()
        kept = await history.read("g1")
        assert [s.total for s in kept] == [6, 6, 6]  # the count bound: the first sample is gone
        served = await asyncio.to_thread(get, f"{admin_url(gw)}/admin/v2/groups/g1/lag-history")
        assert served["samples"] == [{"timestamp": s.timestamp, "total": 6, "partitions": {"lagged": {"0": 4, "1": 2}}}
                                     for s in kept]
        since = await asyncio.to_thread(get, f"{admin_url(gw)}/admin/v2/groups/g1/lag-history?since={kept[-1].timestamp}")
        assert [s["timestamp"] for s in since["samples"]] == [s.timestamp for s in kept if s.timestamp >= kept[-1].timestamp]
        # a group deleted (Kafka's DeleteGroups) takes its history along, and no later sample brings it back
        admin = ck.admin.AdminClient({"bootstrap.servers": boot})
        for f in (await asyncio.to_thread(admin.delete_consumer_groups, ["g1"])).values():
            await asyncio.to_thread(f.result)
        assert await history.read("g1") == []
        assert await gw.store.lag_history.append([LagSample("g1", 0, 1, {})], 60_000, 10) == 0
        assert await history.read("g1") == []
        assert len(await history.read("g2")) == 3
        assert [s.total for s in await history.read("sharers")] == [9, 9, 9]
        for f in (await asyncio.to_thread(admin.delete_consumer_groups, ["sharers"])).values():
            await asyncio.to_thread(f.result)
        assert await history.read("sharers") == []


async def test_the_history_keeps_a_bounded_age(redis_url: str) -> None:
    async with running_gateway(test_config(redis_url, lag_sample_interval=3600)) as gw:
        boot = kafka_bootstrap(gw)
        await gw.services.log.create_topic("aged", 1)
        await asyncio.to_thread(commit, boot, "g", "aged", {0: 0})
        store = gw.store.lag_history
        assert await store.append([LagSample("g", 0, 1, {})], 60_000, 100) == 1
        [first] = await store.read("g")
        # once Redis's clock has moved past the first sample, a 1 ms age bound trims it
        while True:
            assert await store.append([LagSample("g", 0, 2, {})], 1, 100) == 1
            kept = await store.read("g")
            if kept[-1].timestamp > first.timestamp + 1:
                break
        assert [s.total for s in kept] == [2] * len(kept) and all(s.timestamp >= kept[-1].timestamp - 1 for s in kept)


def sampler(gp: GatewayProcess) -> int | None:
    return {r["role"]: r["node_id"] for r in get(f"{gp.admin_url}/admin/v2/gateways")["roles"]}.get("lag sampler")


@pytest.mark.slow
async def test_a_sigkilled_sampler_hands_the_role_to_another_gateway(redis_server: str, tmp_path) -> None:
    """A gateway process samples until SIGKILLed, then one in this process takes the role over. On
    one Redis only: the lease is the same script on a cluster, and a gateway process is slow to start."""
    flush(redis_server)
    gp = GatewayProcess(tmp_path / "a", redis_server,
                        args=["--lease-ms", "1500", "--lag-sample-interval", "0.2", "--log-level", "WARNING"])
    try:
        await asyncio.to_thread(gp.start)
        admin = ck.admin.AdminClient({"bootstrap.servers": gp.kafka_bootstrap})
        for f in admin.create_topics([ck.admin.NewTopic("watched", 1)]).values():
            await asyncio.to_thread(f.result, 30)
        await asyncio.to_thread(produce, gp.kafka_bootstrap, "watched", {0: 4})
        await asyncio.to_thread(commit, gp.kafka_bootstrap, "readers", "watched", {0: 1})
        await eventually(lambda: sampler(gp) == gp.node_id, timeout=20, what="the process sampling")
        cfg = test_config(redis_server, lease_ms=1500, lag_sample_interval=0.2)
        async with running_gateway(cfg) as survivor:
            history = survivor.services.lag
            await eventually(lambda: history.read("readers"), timeout=20, what="a first lag sample")
            gp.kill()
            last = (await history.read("readers"))[-1].timestamp
            await eventually(lambda: any(r.holding for r in survivor.services.roles.roles if r.name == "lag sampler"),
                             timeout=20, what="the survivor taking the lag sampler over")
            later = await eventually(lambda: _after(history, last), timeout=20, what="a sample by the survivor")
            assert all(s.total == 3 for s in later)
    finally:
        if gp.proc is not None and gp.proc.poll() is None:
            gp.proc.kill()
            gp.proc.wait(10)


async def _after(history: LagHistory, ts: int) -> list[LagSample]:
    return [s for s in await history.read("readers") if s.timestamp > ts]
