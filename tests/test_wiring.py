"""The services as the wiring builds them, with no listener: what a transaction's end settles does
not depend on which faces this gateway runs (the one running the reaper may run none of them)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.domain.producer_txn import OFFSETS_TOPIC, CommittedOffset
from gateway.domain.registry import Registry
from gateway.domain.services import Services
from gateway.formats.records import build_batch
from gateway.server.wiring import wired_services
from gateway.store import Store
from tests.conftest import test_config


@pytest.fixture
async def services(store: Store, redis_url: str) -> AsyncIterator[Services]:
    cfg = test_config(redis_url)
    registry = Registry(store, lease_ms=cfg.lease_ms)
    cfg.node_id = await registry.claim(cfg.node_id, "127.0.0.1")
    async with wired_services(cfg, store, registry) as services:
        yield services


async def test_a_commit_settles_a_native_subscriptions_pending_acks(services, store):
    await services.log.create_topic("acks", 1)
    await services.log.append([("acks", 0, build_batch([(None, b"%d" % i, []) for i in range(3)]))])
    await store.subscriptions.open("acks", range(1), "s", initial="earliest", mode="shared")
    txn = await services.txn.begin()
    await services.txn.add_subscriptions(txn, [("acks", 0, "s")])
    await store.subscriptions.lock("acks", "s", str(txn), {0: (3, [])})  # PENDING_ACK of offsets 0-2
    assert await store.subscriptions.positions("acks", range(1)) == {"s": {0: 0}}
    assert await services.txn.end(txn, commit=True) == "COMMITTED"
    assert await store.subscriptions.positions("acks", range(1)) == {"s": {0: 3}}


async def test_a_commit_applies_the_group_offsets_a_kafka_transaction_staged(services, store):
    txn = await services.txn.begin()
    await services.txn.add_subscriptions(txn, [(OFFSETS_TOPIC, 0, "readers")])
    await store.txn_offsets.stage("readers", str(txn), {("t", 0): CommittedOffset(42)})
    assert await store.groups.offsets("readers") == {}
    assert await services.txn.end(txn, commit=True) == "COMMITTED"
    assert (await store.groups.offsets("readers"))[("t", 0)].offset == 42


@pytest.mark.parametrize("redis_url", ["single", "cluster"], indirect=True)
@pytest.mark.parametrize("commit", [True, False])
async def test_the_offsets_a_transaction_staged_are_unstable_until_it_ends(services, store, commit):
    """What a require_stable OffsetFetch is refused (UNSTABLE_OFFSET_COMMIT) until the end settles it."""
    txn = await services.txn.begin()
    await services.txn.add_subscriptions(txn, [(OFFSETS_TOPIC, 0, "readers")])
    await store.txn_offsets.stage("readers", str(txn), {("t", 0): CommittedOffset(42)})
    asked = [("t", 0), ("t", 1)]
    assert await services.txn_producers.unstable_offsets("readers", asked) == {("t", 0)}
    await services.txn.end(txn, commit=commit)
    assert await services.txn_producers.unstable_offsets("readers", asked) == set()
