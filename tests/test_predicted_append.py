"""Predicted appends (gateway/store/predicted.py, lua/append-check-6.lua) on a real Redis: they store
what append-5 stores and answer as it answers, a refused prediction is resent in order and writes
nothing, other writers interleaving on one partition lose and duplicate nothing, and a unit cut off
before its EXEC or run after SCRIPT FLUSH changes nothing it should not."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from gateway.errors import InvalidProducerEpoch, OutOfOrderSequence
from gateway.formats.records import BatchBuilder
from gateway.store import Store, keys
from gateway.store.log import Append, AppendRequest, TopicInfo
from gateway.store.predicted import PredictedAppender


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


async def _open(url: str) -> Store:
    store = Store.open(url)
    await store.ping()  # a Cluster client learns its slots on its first command
    return store


def _appender(store: Store) -> PredictedAppender:
    return PredictedAppender(store.log)


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
        appender = _appender(store)
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
        mine = _appender(store)
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
        writers = [_appender(stores[0]), _appender(stores[1])]
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

        single = redis_url.startswith("redis://")
        before = (await raw_redis.info("commandstats")).get("cmdstat_rename", {}) if single else {}
        await asyncio.gather(*(write(w) for w in range(3)))
        if single:  # some predicted and let through, some refused (their RENAME back found nothing)
            after = (await raw_redis.info("commandstats"))["cmdstat_rename"]
            failed = after["failed_calls"] - before.get("failed_calls", 0)
            assert after["calls"] - before.get("calls", 0) > failed > 0
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
        appender = _appender(store)
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
        appender = _appender(store)
        await appender.append([_req("t", b"a", 1)])  # the prediction seeded: the next one goes through as predicted
        await wakeups.arm([("t", 0)])
        assert _answers(await appender.append([_req("t", b"b", 2)])) == [(1, False)]
        await asyncio.wait_for(woken.wait(), 30)  # a guard against a hang, not a timing
    finally:
        await wakeups.close()
        await reader.close()
        await store.close()
