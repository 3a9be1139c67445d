"""Every Kafka API answered while Redis is away: a handler that found its store unreachable answers a
retriable error and keeps the client's connection (issue #33: GetTelemetrySubscriptions let the
store's error escape, so librdkafka's connection closed on each ask). PRODUCE is left out: with Redis
away it closes the connection on purpose (docs/kafka-differences.md says why)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode as KafkaError

from gateway.kafka.dispatch import ApiKey, load_handlers, supported
from gateway.server.gateway import Gateway
from gateway.store.embedded import EmbeddedRedis
from tests import kafka_wire
from tests.conftest import eventually, running_gateway, test_config

_LEFT_OUT = {ApiKey.PRODUCE, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
"""PRODUCE closes on purpose; the SASL exchange is a state machine of its own, with no Redis in it."""


@pytest.fixture
async def gateway_without_redis(tmp_path: Path) -> AsyncIterator[Gateway]:
    """A gateway started on its own Redis, which is then stopped for the test."""
    redis = EmbeddedRedis(tmp_path)
    redis.start()
    try:
        async with running_gateway(test_config(redis.url)) as gw:
            redis.stop()
            yield gw
    finally:
        redis.stop()


async def test_every_api_answers_with_redis_away(gateway_without_redis: Gateway,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Each API's request as kio builds it empty; one the gateway finds malformed may close (that
    close is the codec's, not the store's), any other must be answered."""
    load_handlers()
    port = gateway_without_redis.listeners["kafka"].port
    closed: list[str] = []
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for reg in supported():
        if reg.api_key in _LEFT_OUT:
            continue
        caplog.clear()
        values = {"client_instance_id": uuid.UUID(int=0)} if reg.api_key == ApiKey.GET_TELEMETRY_SUBSCRIPTIONS else {}
        writer.write(kafka_wire.request(kafka_wire.build_request(reg.api_key, reg.max_version, values), 7))
        try:
            await kafka_wire.read_response(reader)
        except asyncio.IncompleteReadError:
            if "malformed request" not in caplog.text:
                closed.append(ApiKey(reg.api_key).name)
            writer.close()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.close()
    assert not closed, f"connection closed, not answered: {', '.join(closed)}"


async def test_telemetry_subscription_is_refused_retriably(gateway_without_redis: Gateway) -> None:
    conn = await asyncio.open_connection("127.0.0.1", gateway_without_redis.listeners["kafka"].port)
    try:
        resp = await kafka_wire.call(conn, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0,
                                     {"client_instance_id": uuid.UUID(int=0)})
        assert resp.error_code == KafkaError.kafka_storage_error
        again = await kafka_wire.call(conn, ApiKey.API_VERSIONS, 0)  # the connection is still served
        assert again.error_code == KafkaError.none
    finally:
        conn[1].close()



async def test_background_work_warns_in_one_line_while_redis_is_away(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Redis going away is expected: the memory sampler and the group coordinator's adoption of
    stored groups (which logged a traceback) each say so in a WARNING line, the sampler once an outage."""
    redis = EmbeddedRedis(tmp_path)
    redis.start()
    try:
        async with running_gateway(test_config(redis.url, lease_ms=1000)):
            redis.stop()
            caplog.clear()
            lines = ("sampling Redis's memory: redis unavailable", "adopting stored groups: redis unavailable")
            await eventually(lambda: all(line in caplog.text for line in lines), 20, "both warnings")
            assert not [r.getMessage() for r in caplog.records if r.exc_info]
            assert caplog.text.count(lines[0]) == 1
    finally:
        redis.stop()


async def test_find_coordinator_names_a_gateway_with_redis_away(gateway_without_redis: Gateway) -> None:
    """A group's coordinator is named from what the gateway knows, as Kafka answers from its metadata
    cache: three COORDINATOR_NOT_AVAILABLE answers in a row left librdkafka's
    send_offsets_to_transaction waiting past its timeout for ever (tests/jepsen soak
    sentinel:255050520; gateway/kafka/groups.py's _locate says why). The group's own requests there
    are what is refused retriably."""
    gw = gateway_without_redis
    port = gw.listeners["kafka"].port
    conn = await asyncio.open_connection("127.0.0.1", port)
    try:
        one = await kafka_wire.call(conn, ApiKey.FIND_COORDINATOR, 3, {"key": "away", "key_type": 0})
        both = await kafka_wire.call(conn, ApiKey.FIND_COORDINATOR, 4,
                                     {"key_type": 0, "coordinator_keys": ["away", "gone"]})
        commit = await kafka_wire.call(conn, ApiKey.OFFSET_COMMIT, 8, {
            "group_id": "away", "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]})
    finally:
        conn[1].close()
    me = (gw.config.node_id, port)
    assert (one.error_code, (one.node_id, one.port)) == (KafkaError.none, me)
    assert [(c.error_code, (c.node_id, c.port)) for c in both.coordinators] == [(KafkaError.none, me)] * 2
    assert commit.topics[0].partitions[0].error_code == KafkaError.coordinator_not_available
