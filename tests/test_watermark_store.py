"""The watermark scripts on a live Redis: a transaction's markers count by its outcome before they
are settled (a coordinator that died between its marker and the settling) and after."""

from __future__ import annotations

import pytest

from gateway.domain.log import LogService
from gateway.domain.watermark import WatermarkService
from gateway.errors import InvalidProducerEpoch
from gateway.formats.records import build_control_batch
from gateway.store import keys

REDIS_BACKENDS = ("single", "cluster")
END = 1 << 40


async def test_transactional_marks_count_by_outcome_before_and_after_settling(store, raw_redis):
    log = LogService(store)
    await log.create_topic("ws", 1)
    wm = WatermarkService(store, log)
    await wm.send("ws", "p", 100)
    for txn_id, producer_id in (("1:1", 777), ("1:2", 778)):  # open, as the coordinator opens them
        await store.txn.create(txn_id, 60_000, producer_id, 0, "test")
    await wm.send("ws", "q", 50, txn_id="1:1", producer_id=777, producer_epoch=0)
    await wm.send("ws", "r", 10, txn_id="1:2", producer_id=778, producer_epoch=0)
    assert await wm.watermark("ws", {0: END}) == 100  # both wait below the last stable offset
    (p0,) = await wm.partitions("ws")
    assert p0.pending == 2

    txns = store.txn
    await txns.write_markers([("ws", 0)], 777, 0, True, build_control_batch(True, 777, 0))
    await txns.write_markers([("ws", 0)], 778, 0, False, build_control_batch(False, 778, 0))
    assert await wm.watermark("ws", {0: END}) == 50  # q committed, r aborted: read from the log's ranges
    assert await wm.snapshot("ws", 0)
    assert await wm.watermark("ws", {0: END}) == 50

    for _ in range(2):  # settling is safe to repeat
        await wm.settle_txn("ws", 0, "1:1", True)
        await wm.settle_txn("ws", 0, "1:2", False)
        assert await wm.watermark("ws", {0: END}) == 50
        assert (await wm.at("ws", {0: 3}))[0].producers == {"p": 100, "q": 50}
    marks = await raw_redis.zrange(keys.wm_marks("ws", 0), 0, -1)
    assert [m.split(b" ", 2)[1] for m in marks] == [b"-", b"-"]  # r's is gone, q's counts on its own


async def test_a_stale_epoch_cannot_write_a_transactional_marker(store):
    log = LogService(store)
    await log.create_topic("ws-epoch", 1)
    wm = WatermarkService(store, log)
    await store.txn.create("1:1", 60_000, 900, 3, "test")
    await wm.send("ws-epoch", "q", 5, txn_id="1:1", producer_id=900, producer_epoch=3)
    txns = store.txn
    await txns.write_markers([("ws-epoch", 0)], 900, 3, False, build_control_batch(False, 900, 3))
    await txns.write_markers([("ws-epoch", 0)], 900, 4, False, build_control_batch(False, 900, 4))  # fences 3
    with pytest.raises(InvalidProducerEpoch):
        await wm.send("ws-epoch", "q", 6, txn_id="1:1", producer_id=900, producer_epoch=3)
    assert await wm.watermark("ws-epoch", {0: END}) is None


async def test_a_w_idle_on_behalf_of_a_producer_yields_to_its_newer_mark(store):
    """The idle timeout's W_IDLE is written only where the producer sent nothing since the look that
    found it silent: a mark of its own after that holds it back, another producer's does not (even
    one whose name starts with its name)."""
    log = LogService(store)
    await log.create_topic("ws-since", 2)
    wm = WatermarkService(store, log)
    await wm.send("ws-since", "ab", 100)  # 0 in both partitions
    await wm.send("ws-since", "a", 300)  # 1
    seen = [2, 2]  # what the look read up to
    await wm.send("ws-since", "ab", 200)  # 2: "ab" speaks up after the look
    assert await wm.send("ws-since", "ab", None, unless_since=seen) == [-1, -1]
    assert await wm.watermark("ws-since", {0: END, 1: END}) == 200
    assert await wm.send("ws-since", "a", None, unless_since=seen) == [3, 3]
    assert (await wm.at("ws-since", {0: END, 1: END}))[0].producers == {"ab": 200}
