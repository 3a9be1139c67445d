"""Reads of one event-loop turn share one pipeline (`ReadBatches`), on a real Redis: one connection
and one read mark for all of them, each read's replies and errors its own."""

from __future__ import annotations

import asyncio

import pytest

from gateway.store.connection import connect
from gateway.store.read_batch import ReadBatches


@pytest.fixture
async def reads(redis_url):
    r = connect(redis_url)
    yield ReadBatches(r)
    await r.aclose()


async def test_reads_of_one_turn_go_on_one_connection_in_one_round_trip(reads):
    got = await asyncio.gather(*(reads.run([("CLIENT", "ID"), ("ECHO", str(i))], []) for i in range(16)))
    assert len({ids[0] for ids, _ in got}) == 1  # one connection: one pipeline, not 16
    assert [echo for (_, echo), _ in got] == [str(i).encode() for i in range(16)]


async def test_a_read_mark_is_sent_once_after_all_the_reads_and_each_gets_its_replies(reads, raw_redis):
    before = (await raw_redis.info("commandstats")).get("cmdstat_publish", {}).get("calls", 0)
    tail = [("PUBLISH", "gateway:read-mark", ""), ("WAIT", 0, 100)]
    got = await asyncio.gather(*(reads.run([("ECHO", "x")], tail) for _ in range(8)), reads.run([("ECHO", "y")], []))
    assert [replies for replies, _ in got] == [[b"x"]] * 8 + [[b"y"]]
    assert [confirm for _, confirm in got] == [[0, 0]] * 8 + [[]]
    after = (await raw_redis.info("commandstats"))["cmdstat_publish"]["calls"]
    assert after - before == 1


async def test_an_error_stays_with_its_read_and_a_reader_giving_up_leaves_the_others_theirs(reads, raw_redis):
    await raw_redis.set("plain", "v")
    await raw_redis.xadd("s", {"f": "v"}, id="1-1")
    wrong = asyncio.ensure_future(reads.run([("XRANGE", "plain", "-", "+")], []))
    gone = asyncio.ensure_future(reads.run([("ECHO", "gone")], []))
    right = asyncio.ensure_future(reads.run([("XRANGE", "s", "-", "+")], []))
    await asyncio.sleep(0)  # one loop turn: the three have joined the batch
    gone.cancel()
    (err,), _ = await wrong
    assert "WRONGTYPE" in str(err)
    (entries,), _ = await right
    assert entries == [(b"1-1", {b"f": b"v"})]
    with pytest.raises(asyncio.CancelledError):
        await gone


@pytest.mark.parametrize("redis_url", ["cluster"], indirect=True)
async def test_reads_of_partitions_in_different_slots_share_a_batch_on_a_cluster(reads, raw_redis):
    logs = [f"{{t:x:{p}}}:log" for p in range(6)]
    for p, log in enumerate(logs):
        await raw_redis.xadd(log, {"p": str(p)}, id=f"{p + 1}-1")
    got = await asyncio.gather(*(reads.run([("XRANGE", log, "-", "+")], []) for log in logs))
    assert [replies for replies, _ in got] == [[[(f"{p + 1}-1".encode(), {b"p": str(p).encode()})]]
                                               for p in range(6)]
