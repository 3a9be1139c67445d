"""Topics change in one step each, on one Redis and on a cluster: two gateways racing to create,
delete, grow and reconfigure a topic; a gateway stopped between the steps that follow; and each
topic and partition script alone."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgpack
import pytest
from redis.crc import key_slot

from gateway.domain.log import LogService
from gateway.errors import InvalidPartitions, TopicExists, TopicNotFound
from gateway.formats.records import build_batch, iter_records
from gateway.server.gateway import Gateway
from gateway.store import keys
from gateway.store.connection import RedisClient, connect
from gateway.store.log import TopicInfo
from gateway.store.scripts import Scripts
from tests.conftest import test_config

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster
ROUNDS = 20
REGISTRY = [keys.TOPICS, keys.TOPIC_SEQ]


class Raw:
    """Redis and the scripts without a gateway: to look under the store, and to run one step alone
    as a gateway stopped after it would have."""

    def __init__(self, url: str) -> None:
        self.redis: RedisClient = connect(url)
        self.scripts = Scripts(self.redis)

    async def call(self, name: str, call_keys: list[str], args: list[Any]) -> Any:
        return await self.scripts.call(name, call_keys, args)

    async def record(self, name: str) -> dict[str, Any] | None:
        raw = await self.redis.hget(keys.TOPICS, name)
        return None if raw is None else msgpack.unpackb(raw, raw=False)

    async def topic_keys(self, name: str) -> set[bytes]:
        return {k async for k in self.redis.scan_iter(match=keys.topic_keys_pattern(name))}


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[Raw]:
    r = Raw(redis_url)
    yield r
    await r.redis.aclose()


@pytest.fixture
async def two(redis_url: str) -> AsyncIterator[tuple[LogService, LogService]]:
    """The topic services of two gateways sharing one Redis."""
    a, b = Gateway(test_config(redis_url)), Gateway(test_config(redis_url))
    await a.start()
    await b.start()
    try:
        yield a.services.log, b.services.log
    finally:
        await b.stop()
        await a.stop()


def one(value: bytes) -> bytes:
    return build_batch([(None, value, [])])


def values(log_entries: list[Any]) -> list[bytes | None]:
    return [r.value for e in log_entries for r in iter_records(e.batch, e.base_offset)]


async def produce(log: LogService, name: str, partitions: int, value: bytes) -> list[int | Exception]:
    produced = await log.append([(name, p, one(value)) for p in range(partitions)])
    return [r.result if isinstance(r.result, Exception) else r.result.base_offset for r in produced]


# -- two gateways racing ----------------------------------------------------------------------------


async def test_racing_creates_leave_the_winner_whole(two, raw):
    """Exactly one create wins, with its partition count; the loser never resets nor adds a
    partition, even while the winner already writes to them."""
    a, b = two
    for i in range(ROUNDS):
        name = f"race-{i}"
        counts = (1 + i % 4, 6 - i % 4)

        async def create(log: LogService, name: str, n: int) -> TopicInfo:
            info = await log.create_topic(name, n)
            assert await produce(log, name, info.partitions, b"first") == [0] * n  # the loser may be at work
            return info

        results = await asyncio.gather(create(a, name, counts[0]), create(b, name, counts[1]), return_exceptions=True)
        [won] = [i for i, r in enumerate(results) if isinstance(r, TopicInfo)]
        assert isinstance(results[1 - won], TopicExists), results
        winner, loser, n = (a, b)[won], (a, b)[1 - won], counts[won]
        assert (await a.topic(name, create=False)).partitions == (await b.topic(name, create=False)).partitions == n
        assert await produce(loser, name, n, b"second") == [1] * n
        for p in range(n):
            assert values((await winner.read(name, p, 0)).entries) == [b"first", b"second"]
        assert {k for k in await raw.topic_keys(name) if k.endswith(b":meta")} == {
            keys.meta(name, p).encode() for p in range(n)}


async def test_create_delete_cycles_racing_leave_nothing_behind(two, raw):
    """Creates and deletes of one name racing on two gateways, with writes between: every delete
    drops all it had, and a new topic of the name starts empty."""
    a, b = two

    async def cycles(log: LogService, counts: list[int]) -> None:
        for n in counts:
            with contextlib.suppress(TopicExists):
                info = await log.create_topic("cyc", n)
                await produce(log, "cyc", info.partitions, b"old")  # refused where it was deleted meanwhile
            with contextlib.suppress(TopicNotFound):
                await log.delete_topic("cyc")

    await asyncio.gather(cycles(a, [1, 3, 5, 2] * (ROUNDS // 4)), cycles(b, [4, 2, 6, 1] * (ROUNDS // 4)))
    with pytest.raises(TopicNotFound):
        await b.topic("cyc", create=False)
    assert await raw.topic_keys("cyc") == set()
    assert await raw.redis.hlen(keys.TOPICS_DROPPING) == 0

    info = await a.create_topic("cyc", 3)
    for p in range(3):
        assert await b.bounds("cyc", p) == (0, 0)
        assert (await b.read("cyc", p, 0)).entries == []
    assert await raw.topic_keys("cyc") == {keys.meta("cyc", p).encode() for p in range(3)}
    assert info.generation > 0 and len(bytes.fromhex(info.topic_id)) == 16


async def test_config_changes_racing_a_delete_never_bring_the_topic_back(two, raw):
    a, b = two
    for _ in range(ROUNDS):
        await a.create_topic("cfg", 2)

        async def alter(j: int) -> None:
            with contextlib.suppress(TopicNotFound):
                await a.alter_config("cfg", {"retention.ms": str(1000 + j)})

        await asyncio.gather(alter(0), b.delete_topic("cfg"), alter(1), alter(2))
        assert await raw.record("cfg") is None
        with pytest.raises(TopicNotFound):
            await a.topic("cfg", create=False)
        assert await raw.topic_keys("cfg") == set()


async def test_racing_config_changes_are_both_kept(two):
    a, b = two
    await a.create_topic("both", 1)
    await asyncio.gather(*(
        log.alter_config("both", {name: value})
        for _ in range(5)
        for log, name, value in ((a, "retention.ms", "1000"), (b, "retention.bytes", "2000"))
    ))
    assert (await a.topic("both", create=False)).config == {"retention.ms": "1000", "retention.bytes": "2000"}


async def test_racing_growth_ends_at_the_larger_count(two):
    a, b = two
    for i in range(ROUNDS // 4):
        name = f"grow-{i}"
        await a.create_topic(name, 2)
        results = await asyncio.gather(a.add_partitions(name, 4), b.add_partitions(name, 6), return_exceptions=True)
        assert not isinstance(results[1], Exception), results
        assert isinstance(results[0], TopicInfo | InvalidPartitions), results  # refused when the 6 came first
        assert (await a.topic(name, create=False)).partitions == 6
        assert await produce(b, name, 6, b"x") == [0] * 6


# -- a gateway stopped between steps ------------------------------------------------------------------


async def test_a_creation_stopped_after_its_record_is_finished_by_the_next_reader(two, raw):
    a, b = two
    reply = await raw.call("topic-create-2", REGISTRY, ["half", 3, msgpack.packb({}), 1, "00" * 16])
    assert reply[0] == 0
    await raw.call("partition-init-1", [keys.meta("half", 1)], [msgpack.unpackb(reply[1])["g"]])
    with pytest.raises(TopicExists):
        await a.create_topic("half", 5)
    assert [t.partitions for t in await a.list_topics() if t.name == "half"] == [3]
    assert (await b.topic("half", create=False)).partitions == 3
    assert await produce(b, "half", 3, b"x") == [0, 0, 0]


async def test_a_growth_stopped_after_its_record_is_finished_by_the_next_reader(two, raw):
    a, b = two
    await a.create_topic("grown", 2)
    record = await raw.record("grown")
    assert record is not None
    assert (await raw.call("topic-grow-2", REGISTRY, ["grown", record["v"], 5]))[0] == 0
    assert (await b.topic("grown", create=False)).partitions == 5
    assert await produce(a, "grown", 5, b"x") == [0] * 5


@pytest.mark.parametrize("frozen", [False, True])
async def test_a_delete_stopped_after_its_record_hides_the_topic_and_is_finished_later(two, raw, frozen):
    a, b = two
    await a.create_topic("gone", 4)
    assert await produce(a, "gone", 4, b"old") == [0] * 4
    gen = (await raw.call("topic-delete-2", [keys.TOPICS, keys.TOPICS_DROPPING], ["gone", ""]))[1]
    if frozen:
        for p in range(4):
            assert await raw.call("partition-drop-1", [keys.meta("gone", p)], [gen]) == 1
    with pytest.raises(TopicNotFound):
        await b.topic("gone", create=False)
    assert "gone" not in [t.name for t in await b.list_topics()]

    await b.create_topic("gone", 2)  # a new incarnation: the old one's partitions are not reused
    for p in range(2):
        assert await a.bounds("gone", p) == (0, 0)
    assert await produce(a, "gone", 2, b"new") == [0, 0]
    assert values((await b.read("gone", 0, 0)).entries) == [b"new"]
    assert await raw.redis.hlen(keys.TOPICS_DROPPING) == 1

    await a.enforce_retention()  # finishes the deletions gateways left half-way
    assert await raw.redis.hlen(keys.TOPICS_DROPPING) == 0
    assert await raw.topic_keys("gone") == {k("gone", p).encode() for k in (keys.meta, keys.log) for p in range(2)}


# -- each script alone --------------------------------------------------------------------------------


def test_the_registry_keys_share_a_slot():
    assert len({key_slot(k.encode()) for k in (keys.TOPICS, keys.TOPIC_SEQ, keys.TOPICS_DROPPING)}) == 1


async def test_topic_create_script(raw):
    config = msgpack.packb({"retention.ms": "5"})
    code, packed = await raw.call("topic-create-2", REGISTRY, ["t", 3, config, 1234, "ab" * 16])
    rec = msgpack.unpackb(packed, raw=False)
    assert code == 0 and rec["p"] == 0 and rec["n"] == 3 and rec["c"] == {"retention.ms": "5"}
    assert (rec["t"], rec["id"]) == (1234, "ab" * 16) and rec["g"] > 0
    assert await raw.call("topic-create-2", REGISTRY, ["t", 9, config, 1, "cd" * 16]) == [4, packed]


async def test_topic_settle_script(raw):
    _, packed = await raw.call("topic-create-2", REGISTRY, ["t", 3, msgpack.packb({}), 1, "ab" * 16])
    gen = msgpack.unpackb(packed)["g"]
    assert await raw.call("topic-settle-2", REGISTRY, ["t", gen + 1, 3]) == [2]  # another incarnation
    code, settled = await raw.call("topic-settle-2", REGISTRY, ["t", gen, 3])
    rec = msgpack.unpackb(settled, raw=False)
    assert code == 0 and rec["p"] == 3 and "n" not in rec and rec["g"] == gen
    assert await raw.call("topic-settle-2", REGISTRY, ["t", gen, 3]) == [0, settled]  # once
    assert await raw.call("topic-settle-2", REGISTRY, ["u", gen, 3]) == [2]


async def created(raw: Raw, name: str, partitions: int) -> dict[str, Any]:
    _, packed = await raw.call("topic-create-2", REGISTRY, [name, partitions, msgpack.packb({}), 1, "ab" * 16])
    _, settled = await raw.call("topic-settle-2", REGISTRY, [name, msgpack.unpackb(packed)["g"], partitions])
    return msgpack.unpackb(settled, raw=False)


async def test_topic_config_script(raw):
    await raw.call("topic-create-2", REGISTRY, ["pending", 1, msgpack.packb({}), 1, "ab" * 16])
    pending = await raw.record("pending")
    assert await raw.call("topic-config-2", REGISTRY, ["pending", pending["v"], msgpack.packb({})]) == [2]
    assert await raw.call("topic-config-2", REGISTRY, ["none", 0, msgpack.packb({})]) == [2]
    rec = await created(raw, "t", 2)
    assert await raw.call("topic-config-2", REGISTRY, ["t", rec["v"] - 1, msgpack.packb({"a": "1"})]) == [1]
    code, packed = await raw.call("topic-config-2", REGISTRY, ["t", rec["v"], msgpack.packb({"a": "1"})])
    changed = msgpack.unpackb(packed, raw=False)
    assert code == 0 and changed["c"] == {"a": "1"} and changed["v"] > rec["v"]
    assert {k: v for k, v in changed.items() if k not in ("c", "v")} == {k: v for k, v in rec.items() if k not in ("c", "v")}
    assert await raw.call("topic-config-2", REGISTRY, ["t", rec["v"], msgpack.packb({})]) == [1]  # stale now


async def test_topic_id_script_gives_an_older_topic_one_id_once(raw):
    rec = await created(raw, "t", 2)
    del rec["id"]  # as topics were stored before topic ids
    await raw.redis.hset(keys.TOPICS, "t", msgpack.packb(rec))
    assert await raw.call("topic-id-2", REGISTRY, ["none", "cd" * 16]) == [2]
    code, packed = await raw.call("topic-id-2", REGISTRY, ["t", "cd" * 16])
    given = msgpack.unpackb(packed, raw=False)
    assert code == 0 and given["id"] == "cd" * 16 and (given["g"], given["p"]) == (rec["g"], 2)
    assert await raw.call("topic-id-2", REGISTRY, ["t", "ef" * 16]) == [0, packed]  # the first writer's stays


async def test_topic_grow_script(raw):
    rec = await created(raw, "t", 2)
    assert await raw.call("topic-grow-2", REGISTRY, ["none", 0, 4]) == [2]
    code, packed = await raw.call("topic-grow-2", REGISTRY, ["t", rec["v"], 4])
    grown = msgpack.unpackb(packed, raw=False)
    assert code == 0 and (grown["p"], grown["n"]) == (2, 4)
    assert await raw.call("topic-grow-2", REGISTRY, ["t", grown["v"], 5]) == [1]  # one growth at a time
    assert await raw.call("topic-grow-2", REGISTRY, ["t", rec["v"], 5]) == [1]


async def test_topic_delete_and_dropped_scripts(raw):
    dropping = [keys.TOPICS, keys.TOPICS_DROPPING]
    await raw.call("topic-create-2", REGISTRY, ["pending", 1, msgpack.packb({}), 1, "ab" * 16])
    assert await raw.call("topic-delete-2", dropping, ["pending", ""]) == [2]  # not shown yet
    assert await raw.call("topic-delete-2", dropping, ["none", ""]) == [2]
    rec = await created(raw, "t", 2)
    await raw.call("topic-grow-2", REGISTRY, ["t", rec["v"], 5])
    assert await raw.call("topic-delete-2", dropping, ["t", "cd" * 16]) == [2]  # another incarnation's id
    assert await raw.call("topic-delete-2", dropping, ["t", "ab" * 16]) == [0, rec["g"], 5]  # pending ones too
    assert await raw.record("t") is None
    field = f"{rec['g']}:t"
    assert await raw.redis.hgetall(keys.TOPICS_DROPPING) == {field.encode(): b"5"}
    assert await raw.call("topic-delete-2", dropping, ["t", ""]) == [2]
    assert await raw.call("topic-dropped-1", [keys.TOPICS_DROPPING], [field]) == 1
    assert await raw.call("topic-dropped-1", [keys.TOPICS_DROPPING], [field]) == 0


async def test_partition_init_script(raw):
    meta = keys.meta("t", 0)
    assert await raw.call("partition-init-1", [meta], [5]) == 1
    assert await raw.redis.hgetall(meta) == {b"hw": b"0", b"start": b"0", b"maxts": b"-1", b"bytes": b"0", b"gen": b"5"}
    await raw.redis.hset(meta, "hw", 7)
    assert await raw.call("partition-init-1", [meta], [5]) == 0  # made once
    assert await raw.call("partition-init-1", [meta], [4]) == -2  # a newer incarnation's: untouched
    assert await raw.redis.hget(meta, "hw") == b"7"
    assert await raw.call("partition-init-1", [meta], [6]) == -1  # an older one's: frozen, to purge
    assert await raw.redis.hget(meta, "hw") is None
    assert await raw.call("partition-init-1", [meta], [5]) == -2  # its own incarnation, being dropped
    legacy = keys.meta("t", 1)
    await raw.redis.hset(legacy, mapping={"hw": 3, "start": 0})  # from before incarnations
    assert await raw.call("partition-init-1", [legacy], [1]) == -1


async def test_partition_drop_and_purge_scripts(raw):
    meta, log, other = keys.meta("t", 1), keys.log("t", 1), keys.log("t", 10)
    assert await raw.call("partition-drop-1", [meta], [5]) == 0
    await raw.call("partition-init-1", [meta], [5])
    await raw.redis.xadd(log, {"b": "x"}, id="0-1")
    await raw.redis.xadd(other, {"b": "x"}, id="0-1")
    listed = msgpack.packb([log.encode(), other.encode(), meta.encode()], use_bin_type=False)
    assert await raw.call("partition-purge-1", [meta], [5, listed]) == 0  # not frozen: nothing
    assert await raw.call("partition-drop-1", [meta], [4]) == 0  # a newer incarnation's: untouched
    assert await raw.redis.hget(meta, "hw") == b"0"
    assert await raw.call("partition-drop-1", [meta], [5]) == 1
    assert await raw.call("partition-drop-1", [meta], [5]) == 1  # again, after a stop
    assert await raw.redis.hget(meta, "hw") is None and await raw.redis.exists(log) == 1
    assert await raw.call("partition-purge-1", [meta], [4, listed]) == 0  # a newer incarnation's
    assert await raw.call("partition-purge-1", [meta], [5, listed]) == 2  # the log and the meta hash
    assert await raw.redis.exists(meta, log) == 0
    assert await raw.redis.exists(other) == 1  # another partition's key, listed by mistake, stays
    assert await raw.call("partition-purge-1", [meta], [5, listed]) == 0
