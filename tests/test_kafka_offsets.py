"""ListOffsets (earliest, latest, by time) and OffsetForLeaderEpoch through the real clients."""

from __future__ import annotations

import asyncio

import confluent_kafka as ck
import kafka
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from gateway.formats.records import build_batch
from tests.conftest import kafka_bootstrap

pytestmark = pytest.mark.kafka
TIMEOUT = 20


@pytest.fixture
async def timed(gateway):
    """Partition 0 of "timed": offsets 0-2 at t=1000, 3-5 at t=2000, 6-8 at t=3000, then 0-1 deleted."""
    log = gateway.services.log
    await log.create_topic("timed", 1)
    for ts in (1000, 2000, 3000):
        batch = build_batch([(None, f"{ts}-{i}".encode(), []) for i in range(3)], timestamp=ts)
        [done] = await log.append([("timed", 0, batch)])
        assert not isinstance(done.result, Exception)
    return kafka_bootstrap(gateway)


# (query timestamp, expected (offset, timestamp)); None: no record at or after it
BY_TIME = [(0, (0, 1000)), (1500, (3, 2000)), (2000, (3, 2000)), (3000, (6, 3000)), (3001, None)]


async def test_aiokafka_list_offsets(timed):
    consumer = AIOKafkaConsumer(bootstrap_servers=timed, enable_auto_commit=False)
    await consumer.start()
    tp = TopicPartition("timed", 0)
    try:
        assert await consumer.beginning_offsets([tp]) == {tp: 0}
        assert await consumer.end_offsets([tp]) == {tp: 9}
        for ts, expected in BY_TIME:
            found = (await consumer.offsets_for_times({tp: ts}))[tp]
            assert (None if found is None else (found.offset, found.timestamp)) == expected
    finally:
        await consumer.stop()


def _kafka_python_offsets(bs: str) -> None:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False)
    tp = kafka.TopicPartition("timed", 0)
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 9}
        for ts, expected in BY_TIME:
            found = consumer.offsets_for_times({tp: ts})[tp]
            assert (None if found is None else (found.offset, found.timestamp)) == expected
    finally:
        consumer.close()


async def test_kafka_python_list_offsets(timed):
    await asyncio.to_thread(_kafka_python_offsets, timed)


def _confluent_offsets(bs: str) -> None:
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": "unused", "enable.auto.commit": False})
    try:
        assert consumer.get_watermark_offsets(ck.TopicPartition("timed", 0), timeout=TIMEOUT) == (0, 9)
        for ts, expected in BY_TIME:
            [found] = consumer.offsets_for_times([ck.TopicPartition("timed", 0, ts)], timeout=TIMEOUT)
            assert found.error is None
            # librdkafka reports "no such record" as offset -1 (the end)
            assert found.offset == (-1 if expected is None else expected[0])
    finally:
        consumer.close()


async def test_confluent_list_offsets(timed):
    await asyncio.to_thread(_confluent_offsets, timed)


async def test_earliest_follows_deleted_records_and_out_of_range_resets(gateway, timed):
    """After DeleteRecords the earliest offset moves; a consumer below it resets per its policy."""
    assert await gateway.services.log.delete_records("timed", 0, 4) == 4
    consumer = AIOKafkaConsumer(bootstrap_servers=timed, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    tp = TopicPartition("timed", 0)
    try:
        assert await consumer.beginning_offsets([tp]) == {tp: 4}
        consumer.assign([tp])
        consumer.seek(tp, 1)  # below the log start: OFFSET_OUT_OF_RANGE, then reset to earliest
        records = []
        while len(records) < 5:
            got = await consumer.getmany(tp, timeout_ms=TIMEOUT * 1000)
            assert got, "no records within the timeout"
            records += got[tp]
        assert [r.offset for r in records] == [4, 5, 6, 7, 8]
    finally:
        await consumer.stop()
