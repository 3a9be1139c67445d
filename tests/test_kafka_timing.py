"""Each Kafka request's handling time is logged at DEBUG on `gateway.kafka.timing` (`--log-level
DEBUG`), so where a client's wait goes can be read off the gateway's log; above DEBUG nothing."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest

from gateway.kafka.dispatch import ApiKey, load_handlers
from gateway.server.gateway import Gateway
from tests.kafka_wire import call

load_handlers()


async def metadata(gw: Gateway) -> None:
    conn = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
    try:
        await call(conn, ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False})
    finally:
        conn[1].close()


async def test_a_request_s_handling_time_is_logged_at_debug_only(gateway: Gateway,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, "gateway.kafka.timing"):
        await metadata(gateway)
    assert [r for r in caplog.records if r.name == "gateway.kafka.timing"] == []
    with caplog.at_level(logging.DEBUG, "gateway.kafka.timing"):
        await metadata(gateway)
    [line] = [r.getMessage() for r in caplog.records if r.name == "gateway.kafka.timing"]
    assert re.fullmatch(r"metadata v12 correlation 99 from \S+ \('127\.0\.0\.1', \d+\): \d+\.\d{3} ms, "
                        r"\d+ Redis round trips?", line), line
