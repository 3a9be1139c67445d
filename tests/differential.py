"""One scenario, two brokers: the harness of the differential tests. A scenario is an async function
of a `Side` (the real Kafka 4.4 broker or the gateway) returning what a client observed; it runs on
Kafka, then on the gateway, and the two answers, normalised by tests/kafka_differences.py, must be
equal."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tests.conftest import eventually
from tests.kafka_differences import differences, normalise, plain
from tests.kafka_wire import build_request, decode, read_response, request

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@dataclass
class Side:
    """One broker as a scenario sees it: its address, a raw connection and the topics' ids there."""

    name: str  # "kafka" or "gateway"
    bootstrap: str
    conns: list[Conn] = field(default_factory=list)

    async def connect(self) -> Conn:
        host, port = self.bootstrap.rsplit(":", 1)
        conn = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 10)
        self.conns.append(conn)
        return conn

    async def call(self, api_key: int, version: int, values: dict[str, Any] | None = None) -> Any:
        """One request on this scenario's connection; the answer as plain data, or "closed" when the
        broker closes the connection instead (the next call opens another)."""
        conn = self.conns[-1] if self.conns else await self.connect()
        try:
            return plain(await send(conn, build_request(api_key, version, values)))
        except (asyncio.IncompleteReadError, ConnectionError):
            self.conns.remove(conn)
            conn[1].close()
            await self.connect()
            return "closed"

    async def topic_id(self, topic: str) -> uuid.UUID:
        meta = await self.call(3, 12, {"topics": [{"name": topic}]})
        return uuid.UUID(meta["topics"][0]["topic_id"])

    async def close(self) -> None:
        for _, writer in self.conns:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        self.conns.clear()


async def send(conn: Conn, req: Any, correlation_id: int = 99) -> Any:
    reader, writer = conn
    writer.write(request(req, correlation_id))
    cid, resp = decode(req.__api_key__, req.__version__, await read_response(reader))
    assert cid == correlation_id
    return resp


@contextlib.asynccontextmanager
async def side(name: str, bootstrap: str) -> AsyncIterator[Side]:
    s = Side(name, bootstrap)
    try:
        yield s
    finally:
        await s.close()


async def coordinators_ready(s: Side) -> None:
    """Await a broker's group, transaction, share and producer-id services: a fresh Kafka node creates
    their internal topics on first use and answers COORDINATOR_NOT_AVAILABLE (or load in progress)
    until then."""
    async def ready() -> bool:
        found = await s.call(10, 4, {"key_type": 0, "coordinator_keys": ["warm-up"]})
        txn = await s.call(10, 4, {"key_type": 1, "coordinator_keys": ["warm-up"]})
        idempotent = await s.call(22, 4, {"transactional_id": None, "transaction_timeout": 60_000,
                                          "producer_id": -1, "producer_epoch": -1})
        share = await s.call(76, 1, {"group_id": "warm-up", "member_id": str(uuid.uuid4()), "member_epoch": 0,
                                     "subscribed_topic_names": ["warm-up"]})
        return (found["coordinators"][0]["error_code"] == txn["coordinators"][0]["error_code"]
                == share["error_code"] == idempotent["error_code"] == 0)

    await eventually(ready, 60, f"{s.name}'s coordinators")


Scenario = Callable[[Side, str], Awaitable[Any]]


async def compare(scenario: Scenario, kafka_bootstrap: str, gateway_bootstrap: str, prefix: str) -> Any:
    """Run `scenario` on Kafka then on the gateway, with the same fresh names on both, and fail
    with every difference its normalised answers show. Returns Kafka's answer."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    answers = []
    for who, bs in (("kafka", kafka_bootstrap), ("gateway", gateway_bootstrap)):
        async with side(who, bs) as s:
            answers.append(normalise(plain(await scenario(s, name))))
    on_kafka, on_gateway = answers
    diff = differences(on_kafka, on_gateway)
    assert not diff, "the gateway answers otherwise than Kafka 4.4:\n" + "\n".join(diff)
    return on_kafka
