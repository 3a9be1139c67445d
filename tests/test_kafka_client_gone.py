"""A Kafka client that leaves while its answer is pending: on uvloop (what `gateway serve` runs) the
write to the closed transport raises RuntimeError, which the listener logged at ERROR with a
traceback once per such client (issue #33). A client closing its connection is normal: DEBUG."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct

import pytest
import uvloop

from gateway.kafka.dispatch import ApiKey
from tests import kafka_wire
from tests.conftest import eventually, running_gateway, test_config


async def _leave_during_a_fetch(redis_url: str) -> None:
    async with running_gateway(test_config(redis_url)) as gw:
        await gw.services.log.create_topic("gone", 1)
        kafka = gw.listeners["kafka"]
        _, writer = await asyncio.open_connection("127.0.0.1", kafka.port)
        writer.write(kafka_wire.request(kafka_wire.build_request(ApiKey.FETCH, 4, {
            "replica_id": -1, "max_wait": 1000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": "gone", "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}), 1))
        await writer.drain()
        await eventually(lambda: any(c._in_flight for c in kafka.connections), what="the fetch waiting")
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # leave with a reset
        writer.transport.abort()
        await eventually(lambda: not kafka.connections, what="the connection's end")


def test_a_client_gone_before_its_answer_is_no_error(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.kafka.connection")
    uvloop.run(_leave_during_a_fetch(redis_url))
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert any("left before its answer" in r.getMessage() for r in caplog.records)
