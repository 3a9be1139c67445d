"""A share session ends with the connection it was opened on, as on Kafka 4.4: asked of both the
real broker and the gateway on the wire (`same_on_both`)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as KafkaError

from gateway.kafka.dispatch import ApiKey
from tests.conftest import eventually
from tests.kafka_jvm import same_on_both, unique
from tests.kafka_wire import call
from tests.test_kafka_oracle_28 import TIMEOUT, share_gateway, share_topic, topic_id, wire
from tests.test_kafka_share import produce_sync

__all__ = ["share_gateway"]  # the fixture, used by name

pytestmark = [pytest.mark.jvm, pytest.mark.kafka]

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def _fetch(group: str, member: str, epoch: int, tid: uuid.UUID, max_wait: int) -> dict[str, Any]:
    return {"group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait": max_wait,
            "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100, "forgotten_topics_data": [],
            "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]}


def _acquired(r: Any) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in r.responses for p in t.partitions for a in p.acquired_records]


async def _open(bs: str) -> Conn:
    host, port = bs.rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


async def _acquire(conn: Conn, group: str, member: str, epoch: int, tid: uuid.UUID) -> tuple[int, list[Any]]:
    """ShareFetches on `conn` from `epoch` on until some records are acquired: the next epoch, and
    the acquired ranges (a share partition may still be initializing on the first fetch). A session
    not found is opened again, as a client does: Kafka at times ends the session a new connection
    opened while it is still releasing what the closed connection's session held (seen on 4.4)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        r = await call(conn, ApiKey.SHARE_FETCH, 1, _fetch(group, member, epoch, tid, 1000))
        if r.error_code == KafkaError.share_session_not_found and epoch:
            epoch = 0
            continue
        assert r.error_code == 0, r
        epoch += 1
        if got := _acquired(r):
            return epoch, got
        assert time.monotonic() < deadline, "no records acquired"


async def test_a_share_session_ends_with_its_connection_as_on_kafka(share_gateway, kafka_broker) -> None:
    """A member acquires records on one connection, which then closes; on a new connection: a
    ShareFetch with the old session's next epoch (its error, once the close is handled), then one
    opening a new session (the records again, released by the close, and their delivery counts),
    and a heartbeat (whether the member is still in the group). Kafka 4.4: ShareSessionCache's
    ClientConnectionDisconnectListener removes the connection's session and calls
    SharePartitionManager.releaseSession, which releases what the member acquired; membership is
    the group coordinator's, untouched. Seen on 4.4: SHARE_SESSION_NOT_FOUND, the records again at
    once with delivery count 2, and the member still in the group."""
    topic, group = unique("sessclose"), unique("sessclose")

    async def scenario(bs: str) -> object:
        await share_topic(bs, topic, 1, group, share_record_lock_duration_ms="60000")
        await asyncio.to_thread(produce_sync, bs, [b"r%d" % i for i in range(5)], topic)
        tid = await asyncio.to_thread(topic_id, bs, topic)
        member = str(uuid.uuid4())
        beats: list[Any] = []

        async def assigned() -> bool:  # Kafka assigns a partition once its share state is initialized
            found = await wire(bs, ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
            if found.coordinators[0].error_code:  # a new broker makes its group topic first
                return False
            epoch = beats[-1].member_epoch if beats and not beats[-1].error_code else 0
            beats.append(await wire(bs, ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
                "group_id": group, "member_id": member, "member_epoch": epoch, "subscribed_topic_names": [topic]}))
            return bool(beats[-1].assignment and beats[-1].assignment.topic_partitions)

        await eventually(assigned, TIMEOUT, "an assignment")
        joined = beats[-1]
        first = await _open(bs)
        epoch, before = await _acquire(first, group, member, 0, tid)
        first[1].close()
        await first[1].wait_closed()
        second = await _open(bs)
        try:
            deadline = time.monotonic() + TIMEOUT
            while True:  # the close is handled apart from the new connection's requests: until then the session lives
                r = await call(second, ApiKey.SHARE_FETCH, 1, _fetch(group, member, epoch, tid, 0))
                if r.error_code:
                    break
                assert not _acquired(r), r
                epoch += 1
                assert time.monotonic() < deadline, "the session outlived its connection"
            ended = (int(r.error_code), _acquired(r))
            _, again = await _acquire(second, group, member, 0, tid)
        finally:
            second[1].close()
        beat = await wire(bs, ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
            "group_id": group, "member_id": member, "member_epoch": joined.member_epoch,
            "subscribed_topic_names": [topic]})
        return int(joined.error_code), before, ended, again, int(beat.error_code)

    await same_on_both(share_gateway, kafka_broker, scenario)
