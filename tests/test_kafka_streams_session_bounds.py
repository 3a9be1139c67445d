"""The broker's bounds of a streams group's session timeout (Kafka 4.4's GroupCoordinatorConfig
`group.streams.{,min.,max.}session.timeout.ms`, the gateway's `--group-streams-*session-timeout-ms`):
a gateway lowering the floor as the suite's Kafka broker does (SUITE_SETTINGS) describes them as
that broker does, and bounds a group's `streams.session.timeout.ms` as it does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import confluent_kafka.admin as cka
import pytest

from gateway.server.gateway import Gateway
from tests.conftest import eventually, running_gateway, test_config
from tests.kafka_clients import TIMEOUT
from tests.kafka_jvm import SUITE_SETTINGS, same_on_both, unique
from tests.kafka_wire import call

pytestmark = [pytest.mark.jvm, pytest.mark.kafka]

NAMES = ["group.streams.session.timeout.ms", "group.streams.min.session.timeout.ms",
         "group.streams.max.session.timeout.ms"]
DESCRIBE_CONFIGS = 32
FLOOR = int(SUITE_SETTINGS["group.streams.min.session.timeout.ms"])


@pytest.fixture
async def low_floor_gateway(redis_url: str) -> AsyncIterator[Gateway]:
    async with running_gateway(test_config(redis_url, group_streams_min_session_timeout_ms=FLOOR)) as gw:
        yield gw


def _set_session(admin: cka.AdminClient, group: str, ms: int) -> str:
    """IncrementalAlterConfigs SET of the group's streams.session.timeout.ms: "ok", else the error."""
    resource = cka.ConfigResource(cka.ResourceType.GROUP, group, incremental_configs=[
        cka.ConfigEntry("streams.session.timeout.ms", str(ms), incremental_operation=cka.AlterConfigOpType.SET)])
    (f,) = admin.incremental_alter_configs([resource]).values()
    try:
        f.result(TIMEOUT)
    except cka.KafkaException as e:
        return f"{e.args[0].name()}: {e.args[0].str()}"
    return "ok"


async def _described(bs: str) -> dict[str, Any]:
    """The bounds as DescribeConfigs v4 on the broker's own resource lists them, synonyms and all."""
    admin = cka.AdminClient({"bootstrap.servers": bs})
    (node,) = (await asyncio.to_thread(admin.list_topics, timeout=TIMEOUT)).brokers
    host, port = bs.rsplit(":", 1)
    conn = await asyncio.open_connection(host, int(port))
    try:
        r = await call(conn, DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": 4, "resource_name": str(node), "configuration_keys": NAMES}],
            "include_synonyms": True, "include_documentation": True})
    finally:
        conn[1].close()
    (res,) = r.results
    return {c.name: (c.value, c.read_only, int(c.config_source), int(c.config_type), c.documentation,
                     [(y.name, y.value, int(y.source)) for y in c.synonyms]) for c in res.configs}


def _session_described(admin: cka.AdminClient, group: str) -> str:
    (f,) = admin.describe_configs([cka.ConfigResource(cka.ResourceType.GROUP, group)]).values()
    return str(f.result(TIMEOUT)["streams.session.timeout.ms"].value)


async def _group_session(bs: str) -> dict[str, str]:
    """A new group's streams.session.timeout.ms set to values about the bounds: what each answers;
    then what the group describes once the accepted one is applied (it differs from what was
    described before): Kafka's broker applies a group's configs once the controller's record
    reaches its metadata cache, a moment after the answer."""
    admin = cka.AdminClient({"bootstrap.servers": bs})
    group = unique("bounds")
    before = await asyncio.to_thread(_session_described, admin, group)
    out = {str(ms): await asyncio.to_thread(_set_session, admin, group, ms) for ms in (0, FLOOR - 1, 60_001, FLOOR)}

    async def applied() -> str | None:
        now = await asyncio.to_thread(_session_described, admin, group)
        return now if now != before else None

    out["described"] = str(await eventually(applied, TIMEOUT, f"group {group}'s session timeout applied"))
    return out


async def _scenario(bs: str) -> dict[str, Any]:
    return {"broker": await _described(bs), "group": await _group_session(bs)}


async def test_the_streams_session_bounds_are_kafkas(low_floor_gateway, kafka_broker):
    """Described on the broker resource as Kafka describes its static settings (the lowered floor
    STATIC_BROKER_CONFIG over its default, the others DEFAULT_CONFIG, all read-only), and a group
    may set its session timeout from that floor to the max, not beyond, with Kafka's errors."""
    seen = await same_on_both(low_floor_gateway, kafka_broker, _scenario)
    assert seen["group"][str(FLOOR)] == "ok" and seen["group"]["described"] == str(FLOOR)
    assert seen["broker"]["group.streams.min.session.timeout.ms"][0] == str(FLOOR)
