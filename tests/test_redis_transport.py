"""A Redis connection closed under a write, on uvloop (the loop `gateway serve` runs on): redis-py
passes uvloop's RuntimeError for a closed transport through as it comes, not as its ConnectionError.
A Cluster client leaves connections so when one command meets a ConnectionError: it disconnects the
node's free connections while they stay in its free queue, and another task takes one. In tests/jepsen's
soak (seeds cluster:946129829 and cluster:36135963) a produce whose topic-config read met one was
answered UNKNOWN_SERVER_ERROR; librdkafka's idempotent producer takes that as permanent, bumps its
epoch and renumbers what it still holds, so records already stored were written again. Here the
idle connections are closed as that disconnect closes them, left in the pool, and used."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync
import uvloop
from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.topic_configs import Change, Op
from gateway.formats.records import build_batch
from gateway.kafka.dispatch import ApiKey
from gateway.store import Store, keys
from gateway.store.connection import RedisClient
from gateway.store.embedded import EmbeddedCluster
from tests.conftest import eventually, flush, running_gateway, test_config
from tests.kafka_wire import build_request, call, decode, idempotent_batch, request

REDIS_BACKENDS = ("single", "cluster")
TIMEOUT = 30.0


def _on_uvloop(scenario: Coroutine[Any, Any, None]) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario)


def _close_idle(redis: RedisClient) -> int:
    """Close the transports of the client's idle connections, leaving them in its pool as redis-py's
    disconnect does until its close completes; how many."""
    pools = ([node._free for node in redis.get_nodes()] if hasattr(redis, "get_nodes")  # type: ignore[union-attr]
             else [redis.connection_pool._available_connections])  # type: ignore[union-attr]
    idle = [c for pool in pools for c in pool if c.is_connected]
    for conn in idle:
        conn._writer.close()
    return len(idle)


def test_a_command_on_a_connection_closed_under_it_is_sent_again(redis_url):
    async def scenario() -> None:
        store = Store.open(redis_url)
        try:
            assert await store.cluster_config.get() == (0, {})
            assert _close_idle(store._redis)
            assert await store.cluster_config.get() == (0, {})  # not uvloop's RuntimeError
        finally:
            await store.close()
    _on_uvloop(scenario())


def test_a_produce_whose_config_read_meets_a_closed_connection_is_stored(redis_server):
    """The produce's read of the cluster-wide configs (read again after a change) meets the closed
    connection: it is sent again on a new one and the batch stored, not answered UNKNOWN_SERVER_ERROR.
    (On one Redis: which of a Cluster's connections that read takes is the client's choice.)"""
    flush(redis_server)

    async def scenario() -> None:
        async with running_gateway(test_config(redis_server)) as gw:
            await gw.services.log.create_topic("t", 1)
            conn = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
            answers = []
            for value, closing in ((b"a", False), (b"b", True)):
                if closing:
                    await gw.services.log.alter_cluster_config([Change("log.retention.ms", Op.SET, "86400000")])
                    assert gw.store is not None and _close_idle(gw.store._redis)
                resp = await call(conn, ApiKey.PRODUCE, 9, {
                    "transactional_id": None, "acks": -1, "timeout": 1000,
                    "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": build_batch([(None, value, [])])}]}]})
                [p] = resp.responses[0].partition_responses
                answers.append((p.error_code, p.base_offset))
            conn[1].close()
            assert answers == [(KafkaError.none, 0), (KafkaError.none, 1)]
    _on_uvloop(scenario())


def _cluster_state(port: int) -> str:
    with redis_sync.Redis(port=port, decode_responses=True) as r:
        return str(r.cluster("info")["cluster_state"])  # type: ignore[no-untyped-call]


def _produce(topic: str, batch: bytes) -> dict[str, Any]:
    return {"transactional_id": None, "acks": -1, "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}


@pytest.mark.slow
async def test_a_produce_meeting_a_cluster_down_is_never_told_nothing_was_stored(tmp_path: Path, caplog) -> None:
    """A Cluster primary gone, and until its replica takes over the others refuse every command on a
    key (CLUSTERDOWN). The soak's cluster:1039740058 met that in a failover (10:42:24.16-25.17) on
    the code of its day, which answered such produces KAFKA_STORAGE_ERROR: not stored, says
    librdkafka. Once the Cluster was back, a producer's next pipelined produce could overtake the
    refused one's retry and be refused out of order, and librdkafka then bumps its epoch and
    renumbers every record it holds unacknowledged (rdkafka_request.c, "skipped sequence numbers"):
    two batches already stored were sent again, merged into larger ones, 17 records twice. Now the
    connection closes unanswered, as under a leader gone mid-request, the client resends in order
    under the same sequences, and the gateway's log names the batch."""
    caplog.set_level(logging.INFO, "gateway.kafka.produce")
    cluster = EmbeddedCluster(tmp_path / "cluster", node_timeout_ms=500)
    cluster.start()
    try:
        async with running_gateway(test_config(cluster.url)) as gw:
            await gw.services.log.create_topic("t", 1)
            conn = await asyncio.open_connection("127.0.0.1", gw.listeners["kafka"].port)
            [p] = (await call(conn, ApiKey.PRODUCE, 9, _produce("t", idempotent_batch(b"a", 0)))).responses[0].partition_responses
            assert (p.error_code, p.base_offset) == (KafkaError.none, 0)
            with redis_sync.Redis(port=cluster.nodes[0].port) as r:
                slot = int(r.execute_command("CLUSTER", "KEYSLOT", keys.log("t", 0)))
                owner = next(int(s[2][1]) for s in r.execute_command("CLUSTER", "SLOTS") if s[0] <= slot <= s[1])
            gone = next(n for n in cluster.nodes if n.port != owner)  # the partition's primary stays
            assert gone.proc is not None
            gone.proc.kill()
            gone.stop()
            await eventually(lambda: all(_cluster_state(n.port) == "fail" for n in cluster.nodes if n is not gone),
                             TIMEOUT, "the Cluster down")
            reader, writer = conn
            writer.write(request(build_request(ApiKey.PRODUCE, 9, _produce("t", idempotent_batch(b"b", 1))), 7))
            head = await reader.read(4)  # b"" once the gateway closes, else its response's length
            answered = [p.error_code for p in decode(ApiKey.PRODUCE, 9, await reader.readexactly(
                int.from_bytes(head, "big")))[1].responses[0].partition_responses] if head else []
            writer.close()
            assert answered == []  # KAFKA_STORAGE_ERROR before: not stored, says librdkafka
            assert "t-0 pid 4242 epoch 0 seq 1..1 failed, unanswered" in caplog.text, "the gateway's log says"
    finally:
        cluster.stop()
