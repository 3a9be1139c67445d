"""W_SNAPSHOTs: the watermark at any offset costs a bounded number of index entries (counted), after
a gateway restart, for a new subscription and after a seek; open transactions' marks wait in them."""

from __future__ import annotations

import random

from gateway.client import Client
from gateway.server.gateway import Gateway
from gateway.store import keys
from tests.conftest import eventually, native_url, test_config

REDIS_BACKENDS = ("single", "cluster")
B = 16  # watermark_snapshot_marks: lookups read about this many markers at most
BOUND = 2 * B + 1  # a snapshot, the markers since it, and those written while it was being taken


class Oracle:
    """Every marker written, and the watermark at an offset computed from all of them."""

    def __init__(self) -> None:
        self.marks: list[tuple[int, str, int | None]] = []

    def add(self, offset: int, producer: str, value: int | None) -> None:
        self.marks.append((offset, producer, value))

    def at(self, offset: int) -> int | None:
        latest: dict[str, int | None] = {}
        for o, producer, value in sorted(self.marks):
            if o < offset:
                latest[producer] = value
        return min((v for v in latest.values() if v is not None), default=None)



async def started(redis_url: str, node_id: int = 0) -> Gateway:
    gw = Gateway(test_config(redis_url, watermark_snapshot_marks=B, node_id=node_id))
    await gw.start()
    return gw


async def test_lookups_stay_bounded_after_a_restart_for_new_subscriptions_and_seeks(redis_url):
    oracle = Oracle()
    rng = random.Random(7)
    messages = []
    gw = await started(redis_url)
    client = await Client.connect(native_url(gw), reconnect=False)
    try:
        await gw.services.log.create_topic("wms", 1)
        producers = [await client.create_producer("wms", f"p{i}", batching=False) for i in range(3)]
        for i in range(240):
            who = producers[i % 3]
            if rng.random() < 0.1:
                (offset,) = await who.mark_idle()
                oracle.add(offset, who.producer_name, None)
            else:
                value = 1000 + 10 * i - rng.randrange(60)
                (offset,) = await who.send_watermark(value)
                oracle.add(offset, who.producer_name, value)
            if i % 9 == 0:
                messages.append(await who.send(b"m", event_time=1000 + 10 * i))
        await gw.services.watermark.snapshot_pass()
        end = oracle.marks[-1][0] + 1
    finally:
        await gw.stop()
        await client.close()

    gw = await started(redis_url, node_id=1)  # nothing of the first one's memory
    try:
        svc = gw.services.watermark
        for offset in range(0, end + 1, 3):
            before = svc.entries_read
            found = await svc.at("wms", {0: offset})
            assert found[0].watermark == oracle.at(offset), offset
            assert svc.entries_read - before <= BOUND, (offset, svc.entries_read - before)
        assert len(oracle.marks) > 5 * BOUND  # a scan of the log would have shown

        async with await Client.connect(native_url(gw)) as c:
            before = svc.entries_read
            consumer = await c.subscribe("wms", "fresh", initial_position="latest")
            assert consumer.last_watermark == oracle.at(end) is not None
            assert svc.entries_read - before <= BOUND

            middle = messages[len(messages) // 2]
            before = svc.entries_read
            await consumer.seek(middle)  # the message there is not acknowledged: the position stays
            await eventually(lambda: consumer.last_watermark == oracle.at(middle.offset))
            assert (await consumer.receive(5)).offset == middle.offset
            assert svc.entries_read - before <= BOUND
    finally:
        await gw.stop()


async def test_open_transactions_marks_wait_in_snapshots_until_they_end(redis_url):
    gw = await started(redis_url)
    try:
        async with await Client.connect(native_url(gw)) as client:
            await gw.services.log.create_topic("wms-txn", 1)
            x, y, z = [await client.create_producer("wms-txn", n, batching=False) for n in "xyz"]
            await y.send_watermark(1000)
            to_commit = await client.new_transaction(timeout=30)
            to_abort = await client.new_transaction(timeout=30)
            await x.send_watermark(500, txn=to_commit)
            await z.send_watermark(100, txn=to_abort)
            for i in range(3 * B):
                await y.send_watermark(2000 + i)
            assert await gw.services.watermark.snapshot("wms-txn", 0)  # with both transactions open
            (p0,) = await gw.services.watermark.partitions("wms-txn")
            assert p0.pending == 2 and p0.producers == {"y": 1000}  # at the last stable offset
            await to_commit.commit()
            await to_abort.abort()
            last = 2000 + 3 * B - 1
            assert await client.watermark("wms-txn", {0: 1 << 40}) == 500
            (p0,) = await gw.services.watermark.partitions("wms-txn")
            assert (p0.producers, p0.pending) == ({"x": 500, "y": last}, 0)
            assert p0.entries_read <= BOUND
            await x.send_watermark(3000)  # after the commit: x's latest
            assert await gw.services.watermark.snapshot("wms-txn", 0)
            assert await client.watermark("wms-txn", {0: 1 << 40}) == last
    finally:
        await gw.stop()


async def test_the_index_shrinks_with_the_log(redis_url, raw_redis):
    gw = await started(redis_url)
    r = raw_redis
    try:
        async with await Client.connect(native_url(gw)) as client:
            await gw.services.log.create_topic("wms-trim", 1)
            a = await client.create_producer("wms-trim", "a", batching=False)
            b = await client.create_producer("wms-trim", "b", batching=False)
            await b.send_watermark(7)  # early, and b's latest for good
            for i in range(4 * B):
                await a.send_watermark(100 + i)
            marks = keys.wm_marks("wms-trim", 0)
            written = await r.zcard(marks)
            assert await r.zcard(keys.wm_snapshots("wms-trim", 0)) >= 3
            start = await gw.services.log.delete_records("wms-trim", 0, -1)  # everything so far
            for i in range(B):
                await a.send_watermark(1000 + i)
            assert await gw.services.watermark.snapshot("wms-trim", 0)
            assert await r.zcard(marks) < written // 2
            snaps = keys.wm_snapshots("wms-trim", 0)
            assert await r.zcount(snaps, "-inf", start) == 1  # the one at or below the log start
            # b's mark is long gone from the log: the snapshot at the log start remembers it
            assert await client.watermark("wms-trim", {0: start}) == 7
            assert await client.watermark("wms-trim", {0: 1 << 40}) == 7
            await b.mark_idle()
            assert await client.watermark("wms-trim", {0: 1 << 40}) == 1000 + B - 1
    finally:
        await gw.stop()


async def test_the_periodic_role_snapshots_what_sends_left_behind(redis_url):
    marks = B // 4  # too few for a send to snapshot
    gw = Gateway(test_config(redis_url, watermark_snapshot_marks=B, watermark_snapshot_interval=0.05))
    await gw.start()
    try:
        async with await Client.connect(native_url(gw)) as client:
            await gw.services.log.create_topic("wms-role", 1)
            a = await client.create_producer("wms-role", "a", batching=False)
            for i in range(marks):
                await a.send_watermark(i)
            svc = gw.services.watermark

            async def snapshotted() -> bool:
                return await svc.index.unsnapshotted([("wms-role", 0)]) == [0]

            await eventually(snapshotted)
            before = svc.entries_read
            assert (await svc.at("wms-role", {0: 1 << 40}))[0].watermark == marks - 1
            assert svc.entries_read - before == 1  # the snapshot alone
    finally:
        await gw.stop()
