"""Online migration between the group protocols with real clients (confluent-kafka): a three-member
classic group rolled over to `group.protocol=consumer` one member at a time and back under a light
produce load, with no partition owned by two members at any moment (replayed from the members'
assign and revoke callbacks) and every record consumed exactly once past committed offsets."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator

import confluent_kafka as ck
import pytest

from gateway.server.gateway import Gateway
from tests import conftest
from tests.conftest import kafka_bootstrap, test_config
from tests.test_kafka_consumer_groups import HEARTBEAT_MS, SESSION_MS, TOPIC, Log, Member, consumed_once

pytestmark = pytest.mark.kafka

eventually = functools.partial(conftest.eventually, timeout=45.0)

CLASSIC = {"group.protocol": "classic", "session.timeout.ms": 6000, "heartbeat.interval.ms": 200}
CONSUMER: dict[str, object] = {}
# eager classic members give up every partition before they rejoin; cooperative ones list what they
# own in their JoinGroup and give up only what the consumer group's assignment takes away
STRATEGIES = ["range,roundrobin", "cooperative-sticky"]


@contextlib.asynccontextmanager
async def running(redis_url: str, **settings: object) -> AsyncIterator[Gateway]:
    gw = Gateway(test_config(
        redis_url, group_consumer_session_timeout_ms=SESSION_MS, group_consumer_heartbeat_interval_ms=HEARTBEAT_MS,
        **settings,
    ))
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


class Load:
    """A light produce load in the background: numbered records until stopped."""

    def __init__(self, bs: str) -> None:
        self.producer = ck.Producer({"bootstrap.servers": bs, "linger.ms": 5})
        self.sent = 0
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        while True:
            self.producer.produce(TOPIC, key=f"k{self.sent}".encode(), value=f"m-{self.sent}".encode())
            self.sent += 1
            self.producer.poll(0)
            await asyncio.sleep(0.02)

    def __enter__(self) -> Load:
        self.task = asyncio.create_task(self.run())
        return self

    async def stop(self) -> int:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        assert await asyncio.to_thread(self.producer.flush, 10) == 0
        return self.sent

    def __exit__(self, *exc: object) -> None:
        if self.task is not None:
            self.task.cancel()


async def group_type(gw: Gateway, group: str) -> str:
    assert gw.services is not None
    listed = {g.group_id: g.group_type for g in await gw.services.groups.list_groups()}
    return listed[group]


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_rolling_upgrade_and_downgrade(redis_url: str, strategy: str) -> None:
    classic = {**CLASSIC, "partition.assignment.strategy": strategy}
    async with running(redis_url) as gw:
        assert gw.services is not None
        await gw.services.log.create_topic(TOPIC, 6)
        bs, log = kafka_bootstrap(gw), Log()
        members = {n: Member(n, bs, "gm", log, [TOPIC], **classic).start() for n in ("a0", "b0", "c0")}

        async def settled(what: str) -> None:
            await eventually(lambda: all(len(m.owned) == 2 for m in members.values()), what=what)

        with Load(bs) as load:
            await settled("three classic members sharing")
            assert await group_type(gw, "gm") == "classic"
            # upgrade: each classic member in turn replaced by one of the consumer protocol
            for old, new in (("a0", "a1"), ("b0", "b1"), ("c0", "c1")):
                await members.pop(old).close()
                members[new] = Member(new, bs, "gm", log, [TOPIC], **CONSUMER).start()
                await settled(f"{new} of the consumer protocol in place of {old}")
                assert await group_type(gw, "gm") == "consumer"
            # downgrade: back to the classic protocol the same way
            for old, new in (("a1", "a2"), ("b1", "b2"), ("c1", "c2")):
                await members.pop(old).close()
                members[new] = Member(new, bs, "gm", log, [TOPIC], **classic).start()
                await settled(f"classic {new} in place of {old}")
            assert await group_type(gw, "gm") == "classic"
            sent = await load.stop()
        await eventually(lambda: consumed_once(log, sent), what=f"all {sent} records consumed")
        for m in members.values():
            await m.close()
        assert sorted(v for *_, v, _ in log.records) == sorted(f"m-{i}".encode() for i in range(sent))
        log.check_single_owner()
