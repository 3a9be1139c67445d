"""Background roles under epoch-fenced leases: one holder at a time, a takeover with a higher epoch
when the holder goes, and writes of a stale holder refused where its successor has acted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from collections.abc import AsyncIterator

import pytest

from gateway.domain.delay import DelayService
from gateway.domain.log import LogService
from gateway.domain.roles import Lease, RoleLeases
from gateway.errors import NotAllowed
from gateway.formats.records import build_batch
from gateway.server.gateway import Gateway
from gateway.store import Store
from gateway.store.delay import DelayItem
from tests.conftest import admin_url, test_config
from tests.test_kafka_groups import eventually

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster
LEASE_MS = 600


class Recorder:
    """A role that records the epochs it was started with and runs until stopped."""

    def __init__(self, started: list[tuple[int, int]], node: int, lease: Lease) -> None:
        self.started, self.node, self.lease = started, node, lease
        self._stop = asyncio.Event()

    async def run(self) -> None:
        self.started.append((self.node, self.lease.epoch))
        await self._stop.wait()

    def stop(self) -> None:
        self._stop.set()


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    s = Store.open(redis_url)
    yield s
    await s.close()


def gateway_roles(store: Store, node: int, started: list[tuple[int, int]]) -> RoleLeases:
    leases = RoleLeases(store, node, f"instance-{node}", lease_ms=LEASE_MS)
    leases.role("reaper", lambda lease: Recorder(started, node, lease))
    return leases


async def test_one_holder_at_a_time_and_a_takeover_with_a_higher_epoch(store):
    # a gateway took the role, then died: no renewals, no release
    assert await store.roles.hold("reaper", 7, "gone", -1, LEASE_MS) == 1
    started: list[tuple[int, int]] = []
    a, b = gateway_roles(store, 0, started), gateway_roles(store, 1, started)
    tasks = [asyncio.create_task(r.run()) for r in (*a.roles, *b.roles)]
    try:
        await eventually(lambda: len(started) == 1, timeout=5, what="a takeover once the lease lapsed")
        (first, epoch), = started
        assert epoch == 2  # above the dead holder's
        holder, other = (a, b) if first == 0 else (b, a)
        assert holder.roles[0].holding and not other.roles[0].holding
        await asyncio.sleep(LEASE_MS * 2 / 1000)  # renewals keep it where it is
        assert len(started) == 1 and [h.node_id for h in await other.holders()] == [first]

        holder.roles[0].stop()  # a clean stop gives the lease up: the other takes it at its next try
        await eventually(lambda: len(started) == 2, timeout=LEASE_MS / 1000, what="a handover")
        assert started[1] == (1 - first, 3) and other.roles[0].holding
    finally:
        for r in (*a.roles, *b.roles):
            r.stop()
        await asyncio.gather(*tasks)


async def test_retention_of_a_stale_holder_is_refused_where_its_successor_trimmed(store):
    logs = LogService(store)
    await logs.create_topic("t", 2, {"retention.ms": "1"})
    await logs.append([("t", p, build_batch([(b"k", b"v", [])])) for p in (0, 1)])
    await asyncio.sleep(0.01)
    stale, fresh = Lease("retention", 4, float("inf")), Lease("retention", 5, float("inf"))
    assert (await store.log.trim("t", 0, retention_ms=1, role_epoch=fresh.epoch))[0] == 1  # the new log start
    with pytest.raises(NotAllowed):
        await store.log.trim("t", 0, retention_ms=1, role_epoch=stale.epoch)
    # a partition the successor has not reached yet still takes it, as with Kafka's leader epochs
    assert (await store.log.trim("t", 1, retention_ms=1, role_epoch=stale.epoch))[0] == 1
    assert await logs.delete_records("t", 0, -1) == 1  # DeleteRecords is no role: never fenced


async def test_a_stale_delay_scheduler_is_refused_and_the_due_hint_stays(store):
    logs = LogService(store)
    await logs.create_topic("d", 1)
    delay = DelayService(store, clock=lambda: 1_000)
    await delay.index.schedule(1_000, [("d", 0, [DelayItem(2_000, build_batch([(None, b"later", [])]), 1, 0)])])
    await delay.index.schedule(1_000, [("d", 0, [DelayItem(3_000, build_batch([(None, b"last", [])]), 1, 0)])])
    [moved] = await delay.index.move(2_500, [("d", 0)], role_epoch=9)
    assert moved.moved == 1
    [refused] = await delay.index.move(3_500, [("d", 0)], role_epoch=8)
    assert isinstance(refused, NotAllowed)
    assert await delay.index.due_partitions(3_500) == [("d", 0)]  # left for the current holder
    [moved] = await delay.index.move(3_500, [("d", 0)], role_epoch=9)
    assert moved.moved == 1 and (await logs.bounds("d", 0))[1] == 2


def roles_seen(gw: Gateway) -> dict[str, int | None]:
    with urllib.request.urlopen(f"{admin_url(gw)}/admin/v2/gateways", timeout=10) as resp:
        body = json.loads(resp.read())
    return {r["role"]: r["node_id"] for r in body["roles"]}


async def test_two_gateways_run_each_role_once_and_the_survivor_takes_them_all(redis_url):
    a = Gateway(test_config(redis_url, lease_ms=1500))
    b = Gateway(test_config(redis_url, lease_ms=1500))
    await a.start()
    await b.start()
    try:
        names = {"retention", "log cleaner", "transaction reaper", "watermark snapshots", "delay scheduler",
                 "lag sampler"}
        await eventually(lambda: all(r.holding for r in a.services.roles.roles), timeout=5,
                         what="the first gateway holding every role")
        assert not any(r.holding for r in b.services.roles.roles)
        seen = await asyncio.to_thread(roles_seen, b)
        assert seen == dict.fromkeys(names, 0)
        await a.stop()
        await eventually(lambda: all(r.holding for r in b.services.roles.roles), timeout=5,
                         what="the survivor taking every role")
        assert await asyncio.to_thread(roles_seen, b) == dict.fromkeys(names, 1)
    finally:
        with contextlib.suppress(Exception):
            await a.stop()
        await b.stop()


async def test_a_role_taken_by_another_gateway_is_said_once(store, caplog):
    """A gateway whose role another took says so once, not at every renewal attempt after (a soak
    run's losing gateway logged it every lease third, hundreds of times)."""
    started: list[tuple[int, int]] = []
    (role,) = gateway_roles(store, 0, started).roles
    await role._step()
    await eventually(lambda: started, timeout=5, what="the role started")
    ((_, epoch),) = started
    assert role.holding
    assert await store.roles.hold("reaper", 0, "instance-0", epoch, 0) is not None  # given up, as a stop does
    assert await store.roles.hold("reaper", 7, "other", -1, 60_000) == epoch + 1
    for _ in range(3):
        await role._step()
    assert not role.holding
    assert caplog.text.count("role reaper: another gateway holds it now") == 1
