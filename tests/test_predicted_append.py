"""Predicted appends (gateway/store/predicted.py, lua/append-check-6.lua) on a real Redis: they store
what append-5 stores and answer as it answers, a refused prediction is resent in order and writes
nothing, other writers interleaving on one partition lose and duplicate nothing, and a unit cut off
before its EXEC or run after SCRIPT FLUSH changes nothing it should not."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from gateway.errors import InvalidProducerEpoch, OutOfOrderSequence, StorageUnavailable
from gateway.formats.records import BatchBuilder
from gateway.store import Store, keys
from gateway.store.log import Append, AppendRequest, TopicInfo
from tests.conftest import eventually, kafka_bootstrap, running_gateway, test_config
from tests.kafka_clients import consume, produce


def _req(topic: str, value: bytes | str, ts: int, pid: int = -1, epoch: int = -1, seq: int = -1, n: int = 1) -> AppendRequest:
    b = BatchBuilder(**({"producer_id": pid, "producer_epoch": epoch, "base_sequence": seq} if pid >= 0 else {}))
    for k in range(n):
        b.append((value.encode() if isinstance(value, str) else value) + bytes([k]) * 600, timestamp=ts)
    return AppendRequest(topic, 0, b.build(), n, ts, pid, epoch, seq)


def _answers(replies: list[Append | Exception]) -> list[Any]:
    return [type(r).__name__ if isinstance(r, Exception) else (r.base_offset, r.duplicate) for r in replies]


async def _log(r: Any, topic: str) -> tuple[list[Any], Any, Any]:
    entries = await r.xrange(keys.log(topic, 0))
    meta = await r.hmget(keys.meta(topic, 0), "hw", "start", "maxts", "bytes")
    return entries, meta, await r.hgetall(keys.producers(topic, 0))


async def _renames(r: Any, url: str) -> tuple[int, int]:
    """RENAMEs Redis ran and those that failed (a refused unit's RENAME back), on a single Redis."""
    if not url.startswith("redis://"):
        return 0, 0
    stats = (await r.info("commandstats")).get("cmdstat_rename", {})
    return stats.get("calls", 0), stats.get("failed_calls", 0)


async def _open(url: str) -> Store:
    store = Store.open(url)
    await store.ping()  # a Cluster client learns its slots on its first command
    return store


@pytest.mark.parametrize("redis_url", ["single", "cluster"], indirect=True)
async def test_predicted_appends_store_and_answer_what_append_5_does(redis_url, raw_redis):
    store = await _open(redis_url)
    try:
        for t in ("old", "new"):
            await store.log.create_topic(TopicInfo(t, 1))
        plan = [  # plain, idempotent in order, a retry (duplicate), out of order, a stale epoch, a lower max ts
            [("a", 10, -1, -1, -1, 3), ("b", 30, 7, 0, 0, 2), ("c", 20, 7, 0, 2, 1)],
            [("b", 30, 7, 0, 0, 2), ("d", 40, 7, 0, 9, 1), ("e", 5, -1, -1, -1, 1)],
            [("f", 50, 7, 1, 0, 1), ("g", 60, 7, 0, 3, 1), ("h", 70, 7, 1, 1, 4)],
        ]
        answers: dict[str, list[Any]] = {"old": [], "new": []}
        appender = store.log.predicted
        for step in plan:
            answers["old"] += _answers(await store.log.append([_req("old", *s) for s in step]))
            answers["new"] += _answers(await appender.append([_req("new", *s) for s in step]))
        assert answers["new"] == answers["old"] == [
            (0, False), (3, False), (5, False), (3, True), OutOfOrderSequence.__name__, (6, False),
            (7, False), InvalidProducerEpoch.__name__, (8, False)]
        assert await _log(raw_redis, "new") == await _log(raw_redis, "old")
        assert await raw_redis.exists(keys.log_aside("new", 0)) == 0
        assert (await store.log.read("new", 0, 0, 100)).high_watermark == 12
    finally:
        await store.close()


async def test_a_refused_prediction_is_resent_in_order_and_writes_nothing(redis_url, raw_redis):
    store, other = await _open(redis_url), await _open(redis_url)
    try:
        await store.log.create_topic(TopicInfo("t", 1))
        mine = store.log.predicted
        await mine.append([_req("t", b"m0", 1)])
        await other.log.append([_req("t", b"o0", 2, n=2)])  # append-5 by another gateway: my prediction is stale
        renames = (await raw_redis.info("commandstats"))["cmdstat_rename"]
        replies = await mine.append([_req("t", b"m1", 3), _req("t", b"m2", 4)])
        assert _answers(replies) == [(3, False), (4, False)]
        after = (await raw_redis.info("commandstats"))["cmdstat_rename"]
        # the first send of both was refused (their RENAME back found nothing), the resend took both
        assert after["failed_calls"] - renames["failed_calls"] == 2
        entries, meta, _ = await _log(raw_redis, "t")
        assert [(e[0], e[1][b"n"], e[1][b"t"]) for e in entries] == [
            (b"0-1", b"1", b"1"), (b"1-1", b"2", b"2"), (b"3-1", b"1", b"3"), (b"4-1", b"1", b"4")]
        assert meta[0] == b"5" and meta[2] == b"4"
    finally:
        await store.close()
        await other.close()


@pytest.mark.parametrize("redis_url", ["single", "cluster"], indirect=True)
async def test_two_writers_interleaving_on_one_partition_lose_and_duplicate_nothing(redis_url, raw_redis):
    stores = [await _open(redis_url) for _ in range(3)]
    try:
        await stores[0].log.create_topic(TopicInfo("t", 1))
        writers = [stores[0].log.predicted, stores[1].log.predicted]
        sent: dict[bytes, int] = {}
        order: list[list[bytes]] = [[], [], []]

        async def write(w: int) -> None:
            for k in range(12):
                reqs = [_req("t", b"w%d-%02d-%d" % (w, k, j), k, n=1 + j % 2) for j in range(3)]
                if w < 2:
                    replies = await writers[w].append(reqs)
                else:  # a third writer through append-5, as transactional and small batches go
                    replies = await stores[2].log.append(reqs)
                for req, reply in zip(reqs, replies, strict=True):
                    assert isinstance(reply, Append), reply
                    sent[bytes(req.batch)] = reply.base_offset
                    order[w].append(bytes(req.batch))

        before = await _renames(raw_redis, redis_url)
        await asyncio.gather(*(write(w) for w in range(3)))
        calls, failed = (a - b for a, b in zip(await _renames(raw_redis, redis_url), before, strict=True))
        if redis_url.startswith("redis://"):  # some predicted and let through, some refused
            assert calls > failed > 0
        entries, meta, _ = await _log(raw_redis, "t")
        offsets = [int(e[0].split(b"-")[0]) for e in entries]
        counts = [int(e[1][b"n"]) for e in entries]
        assert offsets == [sum(counts[:i]) for i in range(len(counts))]  # contiguous, each batch once
        assert {e[1][b"b"]: o for e, o in zip(entries, offsets, strict=True)} == sent
        assert int(meta[0]) == sum(counts) and int(meta[3]) == sum(len(e[1][b"b"]) for e in entries)
        for w in range(3):  # each writer's batches stored in the order it sent them
            assert len(order[w]) == 36 and [sent[b] for b in order[w]] == sorted(sent[b] for b in order[w])
    finally:
        for s in stores:
            await s.close()


async def test_a_unit_cut_off_before_exec_and_one_after_script_flush(redis_url, raw_redis):
    store = await _open(redis_url)
    try:
        await store.log.create_topic(TopicInfo("t", 1))
        appender = store.log.predicted
        await appender.append([_req("t", b"a", 1)])
        before = await _log(raw_redis, "t")
        host, port = redis_url.removeprefix("redis://").split("/")[0].split(":")
        cut = redis.Redis(host=host, port=int(port), single_connection_client=True)
        cut.execute_command("MULTI")
        cut.execute_command("RENAME", keys.log("t", 0), keys.log_aside("t", 0))  # what a check script would
        cut.close()  # a gateway killed mid-pipeline: no EXEC, nothing ran
        assert await _log(raw_redis, "t") == before
        await raw_redis.script_flush()
        assert _answers(await appender.append([_req("t", b"b", 2), _req("t", b"c", 3)])) == [(1, False), (2, False)]
        assert [e[0] for e in (await _log(raw_redis, "t"))[0]] == [b"0-1", b"1-1", b"2-1"]
    finally:
        await store.close()


@pytest.mark.parametrize("redis_url", ["single", "cluster"], indirect=True)
async def test_a_predicted_append_wakes_readers_waiting_on_another_gateway(redis_url):
    store, reader = await _open(redis_url), await _open(redis_url)
    woken = asyncio.Event()
    wakeups = reader.open_wakeups(lambda topic, partition: woken.set())
    try:
        await store.log.create_topic(TopicInfo("t", 1))
        appender = store.log.predicted
        await appender.append([_req("t", b"a", 1)])  # the prediction seeded: the next one goes through as predicted
        await wakeups.arm([("t", 0)])
        assert _answers(await appender.append([_req("t", b"b", 2)])) == [(1, False)]
        await asyncio.wait_for(woken.wait(), 30)  # a guard against a hang, not a timing
    finally:
        await wakeups.close()
        await reader.close()
        await store.close()


@pytest.mark.parametrize("redis_url", ["single", "cluster"], indirect=True)
async def test_overlapping_produce_appends_keep_their_order_through_refusals(redis_url, raw_redis):
    """As the produce face sends them: the next call starts once the last one's appends are on
    their way; another gateway writes the partition meanwhile, so predictions in flight are refused
    and resent, before the calls after them."""
    store, other = await _open(redis_url), await _open(redis_url)
    try:
        await store.log.create_topic(TopicInfo("t", 1))
        calls = []
        before = await _renames(raw_redis, redis_url)
        for k in range(12):
            reqs = [_req("t", b"p%02d" % k, k, n=1 + k % 3 % 2)]  # over a kilobyte (predicted) and under
            on_way = asyncio.Event()
            calls.append((reqs, asyncio.create_task(store.log.append(reqs, sent=on_way.set))))
            await on_way.wait()
            if k in (3, 7):
                await other.log.append([_req("t", b"o%02d" % k, k)])
        answers = [await task for _, task in calls]
        renamed, failed = (a - b for a, b in zip(await _renames(raw_redis, redis_url), before, strict=True))
        if redis_url.startswith("redis://"):  # some predicted and let through, some refused and resent
            assert renamed > failed > 0
        assert all(isinstance(a, Append) for got in answers for a in got), answers
        entries = (await _log(raw_redis, "t"))[0]
        offsets = [int(e[0].split(b"-")[0]) for e in entries]
        assert offsets == [sum(int(e[1][b"n"]) for e in entries[:i]) for i in range(len(entries))]
        sent = [bytes(reqs[0].batch) for reqs, _ in calls]
        mine = [(o, e[1][b"b"]) for o, e in zip(offsets, entries, strict=True) if e[1][b"b"] in sent]
        assert [b for _, b in mine] == sent  # each once, in the order sent
        assert [a.base_offset for got in answers for a in got] == [o for o, _ in mine]
    finally:
        await store.close()
        await other.close()


@pytest.mark.kafka
async def test_two_gateways_produce_kilobyte_records_to_one_partition_each_once_in_order(redis_url):
    """Kafka clients through two gateways on one Redis, idempotent, five requests in flight each:
    the partition's appends go predicted, refused whenever the other gateway wrote, resent in
    order; every record is stored once, each producer's in the order it sent them."""
    async with running_gateway(test_config(redis_url)) as a, running_gateway(test_config(redis_url)) as b:
        await a.services.log.create_topic("kb", 1)
        sent = {gw: [(None, b"%s-%04d-" % (gw.encode(), i) + b"v" * 1024) for i in range(300)] for gw in "ab"}
        placed = await asyncio.gather(*(
            produce("confluent", kafka_bootstrap(g), "kb", sent[name], **{
                "enable.idempotence": True, "linger.ms": 2, "batch.size": 4096,
                "max.in.flight.requests.per.connection": 5})
            for name, g in (("a", a), ("b", b))))
        stored = await consume("confluent", kafka_bootstrap(a), "kb", 0, 0, 600)
        assert sorted(v for *_, v in stored) == sorted(v for msgs in sent.values() for _, v in msgs)
        assert [off for _, off, *_ in stored] == list(range(600))
        for name, where in zip("ab", placed, strict=True):
            assert [off for _, off in where] == sorted(off for _, off in where)  # in the order sent
            assert [v for *_, v in stored if v.startswith(name.encode())] == [v for _, v in sent[name]]



def _slot_layout(url: str, key: str) -> tuple[list[int], int, int]:
    """The cluster's primaries (ports), `key`'s slot, and the port of the primary serving it."""
    with redis.Redis(port=int(url.rsplit(":", 1)[1].split("/")[0])) as r:
        slots = r.execute_command("CLUSTER", "SLOTS")
        slot = int(r.execute_command("CLUSTER", "KEYSLOT", key))
    ports = sorted({int(s[2][1]) for s in slots})
    return ports, slot, next(int(s[2][1]) for s in slots if s[0] <= slot <= s[1])


def _move_slot(ports: list[int], slot: int, src: int, dst: int) -> Iterator[None]:
    """Redis's own resharding (redis-cli --cluster reshard's steps), yielding after each step while
    the slot is on its way: `dst` importing and `src` migrating, then each key MIGRATEd; then every
    node is told the new owner."""
    with redis.Redis(port=src) as s, redis.Redis(port=dst) as d:
        src_id, dst_id = s.execute_command("CLUSTER", "MYID"), d.execute_command("CLUSTER", "MYID")
        d.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        yield
        for key in s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000):
            s.migrate("127.0.0.1", dst, key, 0, 5000)
            yield
    for port in (dst, src, *(p for p in ports if p not in (src, dst))):
        with redis.Redis(port=port) as r:
            r.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)


def _owner(port: int, slot: int) -> int:
    with redis.Redis(port=port) as r:
        return next(int(s[2][1]) for s in r.execute_command("CLUSTER", "SLOTS") if s[0] <= slot <= s[1])


@pytest.mark.parametrize("redis_url", ["cluster"], indirect=True)
async def test_predicted_appends_through_a_slot_migration_lose_duplicate_and_reorder_nothing(redis_url, raw_redis):
    """The partition's slot moves to another primary (MIGRATING/IMPORTING, its keys MIGRATEd one by
    one, then the new owner announced) while an idempotent producer's kilobyte batches go predicted,
    several calls in flight, as the produce face sends them. While the slot is on its way every
    unit is refused whole (TRYAGAIN, ASK: nothing in its MULTI runs), retriably; once it has moved,
    MOVED sends the next ones to the new owner. Every batch is stored once, in the order sent."""
    store = await _open(redis_url)
    ports, slot, src = _slot_layout(redis_url, keys.log("t", 0))
    dst = next(p for p in ports if p != src)
    sent: list[AppendRequest] = []
    stored: dict[int, Append] = {}
    refused: list[str] = []

    async def produce(n: int) -> bool:
        """`n` new batches and every one not yet stored, each a call of its own sent once the one
        before is on its way; what is not stored waits for the next round, as a producer's retries.
        Whether all sent are stored."""
        for _ in range(n):
            sent.append(_req("t", b"s%03d" % len(sent), len(sent), pid=7, epoch=0, seq=len(sent)))
        calls = []
        for k, r in enumerate(sent):
            if k not in stored:
                on_way = asyncio.Event()
                calls.append((k, asyncio.create_task(store.log.append([r], sent=on_way.set))))
                await on_way.wait()
        failed = False
        for k, task in calls:
            [answer] = await task
            if isinstance(answer, Append) and not failed:
                stored[k] = answer
            else:  # retriable, or refused (out of order) behind one that was
                assert isinstance(answer, StorageUnavailable) or (failed and isinstance(answer, OutOfOrderSequence)), \
                    answer
                refused.append(str(answer))
                failed = True
        return len(stored) == len(sent)

    try:
        await store.log.create_topic(TopicInfo("t", 1))
        assert await produce(4)
        for _ in _move_slot(ports, slot, src, dst):
            assert not await produce(2)  # refused whole, retriably
        assert any("TRYAGAIN" in why for why in refused) and any("ASK" in why for why in refused), refused
        await eventually(lambda: produce(0), 30, "the batches stored on the slot's new owner")
        with redis.Redis(port=dst) as r:
            entries = r.xrange(keys.log("t", 0))
            hw = int(r.hget(keys.meta("t", 0), "hw") or 0)
        assert [e[1][b"b"] for e in entries] == [bytes(r.batch) for r in sent]  # each once, in order
        assert [int(e[0].split(b"-")[0]) for e in entries] == [stored[k].base_offset for k in range(len(sent))] \
            == list(range(len(sent)))
        assert hw == len(sent)
    finally:
        await store.close()
        with redis.Redis(port=dst) as r:  # the shared cluster as it was: the slot back, empty
            for key in r.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000):
                r.delete(key)
        for _ in _move_slot(ports, slot, dst, src):
            pass
        await eventually(lambda: all(_owner(p, slot) == src for p in ports), 30, "the slot back")
