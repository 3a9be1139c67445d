"""The partition log on a real Redis: offsets, idempotence, reads, time lookup, retention."""

from __future__ import annotations

import time

import pytest

from gateway.config import Config
from gateway.domain.log import LogService
from gateway.errors import (
    CorruptMessage,
    InvalidProducerEpoch,
    MessageTooLarge,
    OutOfOrderSequence,
    TopicNotFound,
)
from gateway.formats.records import BatchBuilder, build_batch, iter_records
from gateway.store import Store, keys


@pytest.fixture
async def logs(redis_url):
    store = Store.open(redis_url)
    yield LogService(store, auto_create=False)
    await store.close()


def batch(*values: bytes, ts: int | None = None, **producer) -> bytes:
    b = BatchBuilder(**producer)
    for v in values:
        b.append(v, timestamp=ts)
    return b.build()


async def test_offsets_are_contiguous_across_batches(logs):
    await logs.create_topic("t", 2)
    r = await logs.append([("t", 0, batch(b"a", b"b", b"c")), ("t", 0, batch(b"d")), ("t", 1, batch(b"x"))])
    assert [p.result.base_offset for p in r] == [0, 3, 0]
    assert await logs.bounds("t", 0) == (0, 4)
    sl = await logs.read("t", 0, 0)
    values = [rec.value for e in sl.entries for rec in iter_records(e.batch, e.base_offset)]
    assert values == [b"a", b"b", b"c", b"d"]
    assert sl.high_watermark == 4


async def test_read_from_the_middle_of_a_batch_returns_that_batch(logs):
    await logs.create_topic("t", 1)
    await logs.append([("t", 0, batch(b"a", b"b", b"c")), ("t", 0, batch(b"d", b"e"))])
    sl = await logs.read("t", 0, 1)
    assert [e.base_offset for e in sl.entries] == [0, 3]
    sl = await logs.read("t", 0, 4)
    assert [e.base_offset for e in sl.entries] == [3]
    sl = await logs.read("t", 0, 5)
    assert sl.entries == [] and sl.high_watermark == 5


async def test_idempotent_retry_is_not_stored_twice(logs):
    await logs.create_topic("t", 1)
    first = batch(b"a", b"b", producer_id=7, producer_epoch=0, base_sequence=0)
    second = batch(b"c", producer_id=7, producer_epoch=0, base_sequence=2)
    r = await logs.append([("t", 0, first), ("t", 0, second), ("t", 0, first)])
    assert [(p.result.base_offset, p.result.duplicate) for p in r] == [(0, False), (2, False), (0, True)]
    assert await logs.bounds("t", 0) == (0, 3)
    gap = batch(b"d", producer_id=7, producer_epoch=0, base_sequence=9)
    (r,) = await logs.append([("t", 0, gap)])
    assert isinstance(r.result, OutOfOrderSequence)


async def test_each_of_the_last_five_batches_is_a_duplicate_and_an_older_one_out_of_order(logs):
    """Kafka keeps a producer's last five batches for duplicates (ProducerStateEntry); a retry of
    an older one is out of sequence."""
    await logs.create_topic("t", 1)
    sent = [batch(b"v" * (i + 1), *[b"w"] * i, producer_id=7, producer_epoch=3, base_sequence=i * (i + 1) // 2)
            for i in range(6)]
    stored = [p.result.base_offset for p in await logs.append([("t", 0, b) for b in sent])]
    assert stored == [0, 1, 3, 6, 10, 15]
    again = await logs.append([("t", 0, b) for b in reversed(sent)])
    assert [(p.result.base_offset, p.result.duplicate) for p in again[:5]] == [(15, True), (10, True), (6, True),
                                                                             (3, True), (1, True)]
    assert isinstance(again[5].result, OutOfOrderSequence)
    (state,) = await logs.producer_states("t", 0)
    assert (state.producer_id, state.producer_epoch, state.last_sequence) == (7, 3, 20)


async def test_a_producer_state_stored_in_the_older_json_form_is_read(logs, raw_redis):
    """States written before the fixed-width form (includes/producer.lua) keep working after an upgrade."""
    await logs.create_topic("t", 1)
    await raw_redis.hset(keys.producers("t", 0), "7", '{"e":2,"b":[[0,1,0],[2,2,2]]}')
    await raw_redis.hset(keys.meta("t", 0), "hw", 3)
    (state,) = await logs.producer_states("t", 0)
    assert (state.producer_epoch, state.last_sequence) == (2, 2)
    dup, stale, nxt = await logs.append([("t", 0, batch(b"a", b"b", producer_id=7, producer_epoch=2, base_sequence=0)),
                                         ("t", 0, batch(b"c", producer_id=7, producer_epoch=1, base_sequence=3)),
                                         ("t", 0, batch(b"c", producer_id=7, producer_epoch=2, base_sequence=3))])
    assert (dup.result.base_offset, dup.result.duplicate) == (0, True)
    assert isinstance(stale.result, InvalidProducerEpoch)
    assert (nxt.result.base_offset, nxt.result.duplicate) == (3, False)


async def test_bad_batches_are_refused_alone(logs):
    await logs.create_topic("t", 1, {"max.message.bytes": "200"})
    good = batch(b"ok")
    corrupt = bytearray(batch(b"bad"))
    corrupt[-1] ^= 0xFF
    big = batch(b"x" * 500)
    r = await logs.append([("t", 0, bytes(corrupt)), ("t", 0, good), ("t", 0, big), ("nope", 0, good)])
    assert isinstance(r[0].result, CorruptMessage)
    assert r[1].result.base_offset == 0
    assert isinstance(r[2].result, MessageTooLarge)
    assert isinstance(r[3].result, TopicNotFound)
    assert await logs.bounds("t", 0) == (0, 1)


async def test_offset_for_time(logs):
    await logs.create_topic("t", 1)
    await logs.append([("t", 0, batch(b"a", b"b", ts=1000)), ("t", 0, batch(b"c", ts=2000)),
                       ("t", 0, batch(b"d", ts=3000))])
    assert await logs.offset_for_time("t", 0, 0) == (0, 1000)
    assert await logs.offset_for_time("t", 0, 1500) == (2, 2000)
    assert await logs.offset_for_time("t", 0, 3000) == (3, 3000)
    assert await logs.offset_for_time("t", 0, 3001) is None


async def test_offset_for_time_past_a_deleted_late_record(logs):
    """A deleted record's late timestamp stays in the log's running maximum: the batches after it
    are looked at one by one, over as many script calls as that takes."""
    await logs.create_topic("t", 1)
    await logs.append([("t", 0, batch(b"late", ts=9000))] + [("t", 0, batch(b"early", ts=100))] * 1200
                      + [("t", 0, batch(b"found", ts=5000))])
    await logs.delete_records("t", 0, 1)
    assert await logs.offset_for_time("t", 0, 4000) == (1201, 5000)
    assert await logs.offset_for_time("t", 0, 5001) is None


async def test_retention_by_time_and_bytes_and_delete_records(logs):
    now = int(time.time() * 1000)
    await logs.create_topic("old", 1, {"retention.ms": "60000"})
    await logs.append([("old", 0, batch(b"a", ts=now - 120_000)), ("old", 0, batch(b"b", ts=now - 90_000)),
                       ("old", 0, batch(b"c", ts=now))])
    await logs.create_topic("big", 1, {"retention.bytes": "300"})
    for i in range(10):
        await logs.append([("big", 0, build_batch([(None, bytes([i]) * 100, [])]))])
    removed = await logs.enforce_retention()
    assert await logs.bounds("old", 0) == (2, 3)
    start, hw = await logs.bounds("big", 0)
    assert hw == 10 and 7 <= start < 10
    assert removed == 2 + start
    sl = await logs.read("big", 0, 0)
    assert sl.entries[0].base_offset == start and sl.log_start == start

    await logs.create_topic("d", 1)
    await logs.append([("d", 0, batch(b"a", b"b", b"c")), ("d", 0, batch(b"d"))])
    assert await logs.delete_records("d", 0, 1) == 1
    assert (await logs.read("d", 0, 1)).entries[0].base_offset == 0  # the batch holding offset 1 stays
    assert await logs.delete_records("d", 0, -1) == 4
    assert (await logs.read("d", 0, 4)).entries == []


async def test_auto_create_on_first_use(redis_url):
    store = Store.open(redis_url)
    logs = LogService(store, auto_create=True, default_partitions=3)
    info = await logs.topic("fresh")
    assert info.partitions == 3
    assert [t.name for t in await logs.list_topics()] == ["fresh"]
    await store.close()
    assert Config().kafka_port == 9092


async def test_redis_going_away_is_retriable_and_nothing_acknowledged_is_lost(tmp_path):
    from gateway.errors import StorageUnavailable
    from gateway.store.embedded import EmbeddedRedis

    server = EmbeddedRedis(tmp_path / "r")
    server.start()
    store = Store.open(server.url)
    logs = LogService(store, auto_create=False)
    try:
        await logs.create_topic("t", 1)
        acked = [p.result.base_offset for p in await logs.append([("t", 0, batch(b"%d" % i)) for i in range(50)])]
        assert acked == list(range(50))
        server.stop()
        with pytest.raises(StorageUnavailable) as err:
            await logs.append([("t", 0, batch(b"lost"))])
        assert err.value.retriable
        server.start()  # same port, same AOF
        (p,) = await logs.append([("t", 0, batch(b"after"))])
        assert p.result.base_offset == 50
        sl = await logs.read("t", 0, 0, max_entries=100)
        assert [r.value for e in sl.entries for r in iter_records(e.batch, e.base_offset)] == [
            b"%d" % i for i in range(50)
        ] + [b"after"]
    finally:
        await store.close()
        server.stop()


async def test_a_transactional_batch_holds_the_last_stable_offset(logs):
    await logs.create_topic("t", 1)
    await logs.append([("t", 0, batch(b"plain"))])
    txn = batch(b"t1", b"t2", producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
    await logs.append([("t", 0, txn), ("t", 0, batch(b"later"))])
    sl = await logs.read("t", 0, 0)
    assert (sl.high_watermark, sl.last_stable_offset) == (4, 1)


async def test_sequential_reads_ahead_return_what_a_fresh_read_would(logs):
    """A byte-limited reader gets its next slice read early: the same batches, in order, and
    nothing from below a log start moved meanwhile."""
    await logs.create_topic("t", 1)
    for i in range(6):
        await logs.append([("t", 0, batch(b"%d" % i * 100))])
    seen, offset = [], 0
    while offset < 6:
        sl = await logs.read("t", 0, offset, max_bytes=200)
        fresh = await logs.read("t", 0, offset)
        assert sl.entries == fresh.entries[:len(sl.entries)]  # what did not fit last time, then what follows
        seen += [rec.value for e in sl.entries[:1] for rec in iter_records(e.batch, e.base_offset)]
        offset = sl.entries[0].next_offset
    assert seen == [b"%d" % i * 100 for i in range(6)]
    sl = await logs.read("t", 0, 2, max_bytes=200)  # and offset 3 is being read ahead
    await logs.delete_records("t", 0, 4)
    sl = await logs.read("t", 0, 3, max_bytes=200)
    assert sl.log_start == 4
