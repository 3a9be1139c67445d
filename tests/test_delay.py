"""Delayed delivery on a real Redis: the bucketed index, the scheduler, transactions, memory."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Callable

import pytest

from gateway.clock import now_ms
from gateway.domain.delay import DelayConfig, DelayRequest, DelayScheduler, DelayService
from gateway.domain.log import LogService
from gateway.domain.txn import TransactionCoordinator
from gateway.formats.records import build_batch, iter_records
from gateway.store import Store, keys
from tests.conftest import eventually

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster

T0 = 1_700_000_000_000


class Clock:
    """A settable clock: index tests move time by hand instead of sleeping."""

    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def msg(value: str) -> bytes:
    return build_batch([(None, value.encode(), [])])


async def log_values(log: LogService, topic: str, partition: int = 0) -> list[str]:
    out: list[str] = []
    offset = 0
    while True:
        sl = await log.read(topic, partition, offset, 512)
        for e in sl.entries:
            out += [r.value.decode() for r in iter_records(e.batch, e.base_offset) if r.value is not None]
            offset = e.next_offset
        if offset >= sl.high_watermark:
            return out


@pytest.fixture
async def env(redis_url: str) -> AsyncIterator[tuple[Store, LogService]]:
    store = Store.open(redis_url)
    log = LogService(store)
    await log.create_topic("t", 4)
    try:
        yield store, log
    finally:
        await store.close()


def service(store: Store, log: LogService, clock: Callable[[], int] = now_ms, **cfg: int) -> DelayService:
    return DelayService(store, DelayConfig(**cfg), notify_partition=log.notifier.notify, clock=clock)


@contextlib.asynccontextmanager
async def running(scheduler: DelayScheduler) -> AsyncIterator[DelayScheduler]:
    task = asyncio.create_task(scheduler.run())
    try:
        yield scheduler
    finally:
        scheduler.stop()
        await asyncio.wait_for(task, 5)


async def test_delivery_time_order_and_ties_in_produce_order(env):
    store, log = env
    clock = Clock()
    svc = service(store, log, clock)
    times = {"c": 30, "a": 10, "b1": 20, "d": 40, "b2": 20, "b3": 20}
    await svc.schedule([DelayRequest("t", 0, msg(v), T0 + dt) for v, dt in times.items()])
    s = svc.scheduler()
    assert await s.step() == 0
    assert await log_values(log, "t") == []
    clock.ms = T0 + 20
    assert await s.step() == 4
    assert await log_values(log, "t") == ["a", "b1", "b2", "b3"]
    clock.ms = T0 + 100
    assert await s.step() == 2
    assert await log_values(log, "t") == ["a", "b1", "b2", "b3", "c", "d"]
    assert (await svc.stats("t", 0)).messages == 0


async def test_due_messages_are_appended_at_once(env):
    store, log = env
    clock = Clock()
    svc = service(store, log, clock)
    res = await svc.schedule([DelayRequest("t", 1, msg("late"), T0 - 5), DelayRequest("t", 1, msg("later"), T0 + 5)])
    assert [r.held for r in res] == [1, 1]  # one call per partition: one of its two messages held
    assert await log_values(log, "t", 1) == ["late"]
    assert (await svc.stats("t", 1)).messages == 1


async def test_a_due_message_never_overtakes_an_earlier_one_still_waiting(env):
    store, log = env
    clock = Clock()
    svc = service(store, log, clock)
    await svc.schedule([DelayRequest("t", 0, msg("a"), T0 + 10)])
    clock.ms = T0 + 20  # "a" is due, but no scheduler has moved it yet
    res = await svc.schedule([DelayRequest("t", 0, msg("b"), T0 + 15), DelayRequest("t", 0, msg("early"), T0 + 5)])
    assert [r.held for r in res] == [1, 1]  # "b" waits behind "a"; "early" is due before "a": at once
    assert await log_values(log, "t") == ["early"]
    assert await svc.scheduler().step() == 2
    assert await log_values(log, "t") == ["early", "a", "b"]
    # messages of one call that are all due enter in delivery-time order, not the order given
    await svc.schedule([DelayRequest("t", 1, msg(v), T0 + dt) for v, dt in (("x", -1), ("y", -3), ("z", -2))])
    assert await log_values(log, "t", 1) == ["y", "z", "x"]


async def test_sealed_buckets_read_back_in_order_across_segments(env, raw_redis):
    store, log = env
    clock = Clock()
    svc = service(store, log, clock, bucket_max=10, segment_entries=4)
    # 25 messages: two sealed buckets of 10 (3 segments each), 5 in the open bucket; times interleave
    order = [(T0 + 1000 + (i * 37) % 25 * 10, f"m{i:02}") for i in range(25)]
    await svc.schedule([DelayRequest("t", 0, msg(v), at) for at, v in order])
    st = await svc.stats("t", 0)
    assert (st.messages, st.buckets, st.open_messages) == (25, 2, 5)
    assert st.next_due_ms == T0 + 1000
    s = svc.scheduler()
    clock.ms = T0 + 1000 + 120  # the first 13 due
    assert await s.step() == 13
    clock.ms = T0 + 10_000
    assert await s.step() == 12
    expected = [v for _, v in sorted(order)]
    assert await log_values(log, "t") == expected
    # emptied buckets and their segments are gone
    assert [k async for k in raw_redis.scan_iter(match=keys.delay_buckets("t", 0) + "*")] == []
    assert (await svc.stats("t", 0)).buckets == 0


async def test_partially_moved_bucket_keeps_its_cursor(env):
    store, log = env
    clock = Clock()
    svc = service(store, log, clock, bucket_max=20, segment_entries=3, move_limit=4)
    await svc.schedule([DelayRequest("t", 0, msg(f"m{i:02}"), T0 + 10 + i) for i in range(20)])
    assert (await svc.stats("t", 0)).buckets == 1
    clock.ms = T0 + 17  # 8 due: two move steps of 4, the second ending inside a segment
    moved = await svc.index.move(clock.ms, [("t", 0)])
    assert moved[0].moved == 4 and moved[0].next_due_ms == T0 + 14
    assert await svc.scheduler().step() == 4
    st = await svc.stats("t", 0)
    assert (st.messages, st.next_due_ms) == (12, T0 + 18)
    clock.ms = T0 + 100
    await svc.scheduler().step()
    assert await log_values(log, "t") == [f"m{i:02}" for i in range(20)]


async def test_bucket_cap_merges_the_smallest_adjacent_pair(env, raw_redis):
    store, log = env
    clock = Clock()
    svc = service(store, log, clock, bucket_max=10, bucket_span_ms=1000, max_buckets=3, segment_entries=4)
    sizes = [10, 3, 2, 10]  # the open bucket is sealed when full or after its span
    n = 0
    for size in sizes:
        await svc.schedule([DelayRequest("t", 0, msg(f"m{n + i:02}"), T0 + 5000 - n - i) for i in range(size)])
        n += size
        clock.ms += 1000
    await svc.schedule([DelayRequest("t", 0, msg("last"), T0 + 6000)])  # seals the fourth: over the cap
    buckets = keys.delay_buckets("t", 0)
    ids = sorted(int(i) for i in await raw_redis.zrange(buckets, 0, -1))
    counts = [int(await raw_redis.hget(f"{buckets}:{i}", "n")) for i in ids]
    assert counts == [10, 5, 10]  # the 3 and the 2 merged
    clock.ms = T0 + 10_000
    assert await svc.scheduler().step() == 26
    expected = [f"m{i:02}" for i in reversed(range(25))] + ["last"]
    assert await log_values(log, "t") == expected


async def test_sealed_index_costs_under_24_bytes_per_message(env):
    store, log = env
    clock = Clock()
    svc = service(store, log, clock, bucket_max=10_000)
    for k in range(5):
        reqs = [DelayRequest("t", 2, msg(str(i)), T0 + 60_000 + (i * 7919) % 10_000) for i in range(k, 10_000, 5)]
        await svc.schedule(reqs)
    st = await svc.stats("t", 2)
    assert (st.messages, st.buckets, st.open_messages) == (10_000, 1, 0)
    assert st.index_bytes_per_message < 24, st
    assert st.payload_bytes_per_message > 0


async def test_scheduler_delivers_on_time_and_wakes_for_an_earlier_message(env):
    store, log = env
    svc = service(store, log)
    async with running(svc.scheduler(max_sleep=30)):
        start = now_ms()
        await svc.send("t", 0, msg("late"), deliver_after_ms=20_000)
        await asyncio.sleep(0.05)  # let the scheduler fall asleep until the late one
        await svc.send("t", 0, msg("soon"), deliver_at_ms=start + 150)
        await eventually(lambda: _hw(log, "t", 0, 1), timeout=5)
        assert now_ms() - start >= 150
        assert await log_values(log, "t") == ["soon"]


async def _hw(log: LogService, topic: str, partition: int, n: int) -> bool:
    return (await log.bounds(topic, partition))[1] >= n


async def test_every_reader_of_the_log_sees_each_delayed_message_once(env):
    store, log = env
    svc = service(store, log)
    base = now_ms() + 100
    await svc.schedule([DelayRequest("t", 3, msg(f"m{i}"), base + i * 3) for i in range(50)])
    async with running(svc.scheduler()):
        got: dict[str, list[str]] = {"sub-a": [], "sub-b": []}

        async def reader(name: str) -> None:
            offset = 0
            while len(got[name]) < 50:
                sl = await log.read("t", 3, offset)
                for e in sl.entries:
                    got[name] += [r.value.decode() for r in iter_records(e.batch, e.base_offset)]
                    offset = e.next_offset
                if not sl.entries:
                    await log.notifier.wait([("t", 3)], 1.0)

        await asyncio.wait_for(asyncio.gather(reader("sub-a"), reader("sub-b")), 10)
    assert got["sub-a"] == got["sub-b"] == [f"m{i}" for i in range(50)]


async def test_pending_messages_survive_a_restart(redis_url):
    store = Store.open(redis_url)
    log = LogService(store)
    await log.create_topic("t", 1)
    svc = service(store, log, bucket_max=8, segment_entries=4)
    base = now_ms() + 300
    await svc.schedule([DelayRequest("t", 0, msg(f"m{i:02}"), base + i) for i in range(20)])
    await store.close()

    store2 = Store.open(redis_url)
    log2 = LogService(store2)
    svc2 = service(store2, log2, bucket_max=8, segment_entries=4)
    try:
        async with running(svc2.scheduler()):
            await eventually(lambda: _hw(log2, "t", 0, 20), timeout=5)
        assert await log_values(log2, "t") == [f"m{i:02}" for i in range(20)]
        assert (await svc2.stats("t", 0)).messages == 0
    finally:
        await store2.close()


async def test_transaction_commit_schedules_and_abort_discards(env):
    store, log = env
    clock = Clock(now_ms())
    svc = service(store, log, clock)
    coord = TransactionCoordinator(store, partition_settlers={svc.settle_kind: svc.settle_txn})
    committed, aborted = await coord.begin(), await coord.begin()
    for txn, name in ((committed, "c"), (aborted, "a")):
        await coord.add_partitions(txn, [("t", 0)])
        res = await svc.schedule([DelayRequest("t", 0, msg(f"{name}{i}"), clock.ms + 50 + i, str(txn)) for i in range(3)])
        assert [r.held for r in res] == [0, 0, 0]
    assert (await svc.stats("t", 0)).pending_transactions == 2
    assert (await svc.stats("t", 0)).messages == 0
    await coord.end(aborted, commit=False)
    await coord.end(committed, commit=True)
    st = await svc.stats("t", 0)
    assert (st.messages, st.pending_transactions) == (3, 0)
    await coord.end(committed, commit=True)  # repeating the commit schedules nothing twice
    assert (await svc.stats("t", 0)).messages == 3
    clock.ms += 1000
    assert await svc.scheduler().step() == 3
    values = [v for v in await log_values(log, "t") if v in ("c0", "c1", "c2", "a0", "a1", "a2")]
    assert values == ["c0", "c1", "c2"]


async def test_a_transaction_without_a_record_of_its_settlers_settles_every_partition(env, raw_redis):
    """One opened by an older gateway recorded nothing of what its end settles: all of it is settled."""
    store, log = env
    clock = Clock(now_ms())
    svc = service(store, log, clock)
    coord = TransactionCoordinator(store, partition_settlers={svc.settle_kind: svc.settle_txn})
    txn = await coord.begin()
    await coord.add_partitions(txn, [("t", 0)])
    await svc.schedule([DelayRequest("t", 0, msg(f"o{i}"), clock.ms + 50, str(txn)) for i in range(2)])
    await raw_redis.hdel(keys.txn(str(txn)), "marked")
    await raw_redis.delete(keys.txn_settle(str(txn)))
    await coord.end(txn, commit=True)
    st = await svc.stats("t", 0)
    assert (st.messages, st.pending_transactions) == (2, 0)


async def test_two_concurrent_schedulers_deliver_exactly_once(redis_url):
    stores = [Store.open(redis_url), Store.open(redis_url)]
    log = LogService(stores[0])
    await log.create_topic("t", 4)
    base = now_ms() + 200
    # the producers schedule as of a moment before the first delivery time, however long that takes
    # on a loaded machine, so every message waits for the schedulers (the order test's premise)
    before = Clock(base - 1)
    producers = [service(s, log, before, bucket_max=100, segment_entries=16, move_limit=7) for s in stores]
    n = 2000
    held = 0
    for k, svc in enumerate(producers):  # both gateways produce, both schedule
        requests = [DelayRequest("t", i % 4, msg(f"m{i}"), base + (i * 13) % 400) for i in range(k, n, 2)]
        per_partition = {r.partition: s for r, s in zip(requests, await svc.schedule(requests), strict=True)}
        held += sum(s.held for s in per_partition.values())
    assert held == n
    movers = [service(s, log, bucket_max=100, segment_entries=16, move_limit=7) for s in stores]
    schedulers = [svc.scheduler(max_sleep=0.05) for svc in movers]
    try:
        async with running(schedulers[0]), running(schedulers[1]):
            async def all_moved() -> bool:  # in the logs, and counted by the schedulers that moved them
                logged = sum([(await log.bounds("t", p))[1] for p in range(4)])
                return logged >= n and schedulers[0].moved + schedulers[1].moved >= held

            await eventually(all_moved, timeout=15)
        assert schedulers[0].moved > 0 and schedulers[1].moved > 0
        assert schedulers[0].moved + schedulers[1].moved == held
        values = [v for p in range(4) for v in await log_values(log, "t", p)]
        assert sorted(values) == sorted(f"m{i}" for i in range(n))
        for p in range(4):  # each partition in delivery order
            got = await log_values(log, "t", p)
            times = [(base + (int(v[1:]) * 13) % 400, int(v[1:])) for v in got]
            assert times == sorted(times)
    finally:
        for s in stores:
            await s.close()


_KILLABLE = """
import asyncio, sys
from gateway.domain.delay import DelayConfig, DelayService
from gateway.store import Store

async def main():
    svc = DelayService(Store.open(sys.argv[1]), DelayConfig(move_limit=3))
    print("ready", flush=True)
    while True:
        await svc.scheduler().step()

asyncio.run(main())
"""


async def test_a_scheduler_killed_mid_move_loses_and_repeats_nothing(env, redis_url):
    store, log = env
    clock = Clock(now_ms())
    svc = service(store, log, clock, bucket_max=50, segment_entries=8)
    n = 3000
    await svc.schedule([DelayRequest("t", i % 4, msg(f"m{i}"), clock.ms + 20 + i % 97) for i in range(n)])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _KILLABLE, redis_url, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        assert (await proc.stdout.readline()).strip() == b"ready"

        async def some_moved() -> bool:
            return sum([(await log.bounds("t", p))[1] for p in range(4)]) > 0

        await eventually(some_moved, timeout=10)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert sum([(await svc.stats("t", p)).messages for p in range(4)]) > 0  # killed part way
    clock.ms += 1000
    await svc.scheduler().step()
    values = [v for p in range(4) for v in await log_values(log, "t", p)]
    assert sorted(values) == sorted(f"m{i}" for i in range(n))
    assert (await svc.stats("t", 0)).messages == 0
