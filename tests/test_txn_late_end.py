"""An EndTxn of transactions V1 held up on its way to Redis must not end the transaction after the one
it meant. Found by tests/jepsen's soak (sentinel:659359618): a gateway cut off from Redis held a
producer's EndTxn for 7.8 s; the producer, answered through another gateway, began its next
transaction, and the late EndTxn then committed that one, its records without its offsets."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import pytest

from tests.conftest import flush, kafka_bootstrap, running_gateway, test_config
from tests.differential import Side, side
from tests.test_kafka_differential import create
from tests.test_kafka_txn_v2 import _batch

pytestmark = pytest.mark.kafka

CONCURRENT_TRANSACTIONS = 51


@contextlib.asynccontextmanager
async def holding_relay(port: int, marker: bytes, *, replies: bool = False,
                        ) -> AsyncIterator[tuple[int, asyncio.Event, asyncio.Event]]:
    """A TCP relay to the Redis at `port`: (its port, `flowing`, `held`). While `flowing` is clear,
    what a client sends (with `replies`, what Redis sends it) is held, as a cut link holds it, and
    `held` is set once a held chunk names `marker`; it goes on, in order, once `flowing` is set again."""
    flowing, held = asyncio.Event(), asyncio.Event()
    flowing.set()

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gated: bool) -> None:
        try:
            while data := await reader.read(1 << 16):
                if gated and not flowing.is_set():
                    held.set() if marker in data else None
                    await flowing.wait()
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(pump(reader, up_writer, not replies), pump(up_reader, writer, replies))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], flowing, held
    finally:
        server.close()


async def _begin_and_produce(s: Side, tid: str, pid: int, epoch: int, seq: int, value: bytes) -> None:
    """AddPartitionsToTxn v3 (opening the producer's next transaction) and one transactional record."""
    added = await s.call(24, 3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                 "v3_and_below_producer_epoch": epoch,
                                 "v3_and_below_topics": [{"name": tid, "partitions": [0]}]})
    assert [r["partition_error_code"] for t in added["results_by_topic_v3_and_below"]
            for r in t["results_by_partition"]] == [0], added
    produced = await s.call(0, 9, {"transactional_id": tid, "acks": -1, "timeout": 10_000, "topic_data": [
        {"name": tid, "partition_data": [{"index": 0, "records": _batch(pid, epoch, seq, value)}]}]})
    assert produced["responses"][0]["partition_responses"][0]["error_code"] == 0


async def _end(s: Side, tid: str, pid: int, epoch: int) -> int:
    """EndTxn v3 (transactions V1), commit: its error code."""
    answer = await s.call(26, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                  "committed": True})
    return int(answer["error_code"])


async def test_an_end_txn_held_up_on_its_way_to_redis_does_not_end_the_next_transaction(redis_server: str) -> None:
    """The producer's EndTxn to g2 is held on g2's link to Redis; sent again through g1 it commits
    the first transaction, and the producer begins a second there. Let through, the held one finds
    a transaction opened after it arrived: refused CONCURRENT_TRANSACTIONS (a retry, to a producer
    long past it), the second transaction left open, and committed by its own EndTxn."""
    flush(redis_server)
    tid = f"late-end-{uuid.uuid4().hex[:8]}"
    redis_port = urlparse(redis_server).port
    assert redis_port is not None
    async with holding_relay(redis_port, tid.encode()) as (relay_port, flowing, held), \
            running_gateway(test_config(redis_server)) as g1, \
            running_gateway(test_config(f"redis://127.0.0.1:{relay_port}")) as g2, \
            side("g1", kafka_bootstrap(g1)) as s1, side("g2", kafka_bootstrap(g2)) as s2:
        await create(s1, tid, 1)
        init = await s1.call(22, 4, {"transactional_id": tid, "transaction_timeout": 60_000, "producer_id": -1,
                                     "producer_epoch": -1})
        pid, epoch = init["producer_id"], init["producer_epoch"]
        await _begin_and_produce(s1, tid, pid, epoch, 0, b"first")
        flowing.clear()
        late = asyncio.create_task(_end(s2, tid, pid, epoch))
        await held.wait()  # g2's step for it is on its way to Redis, held
        assert await _end(s1, tid, pid, epoch) == 0  # the producer's retry through g1
        await _begin_and_produce(s1, tid, pid, epoch, 1, b"second")
        flowing.set()
        assert await late == CONCURRENT_TRANSACTIONS
        described = await s1.call(65, 0, {"transactional_ids": [tid]})
        assert described["transaction_states"][0]["transaction_state"] == "Ongoing"  # the second, still open
        assert await _end(s1, tid, pid, epoch) == 0
        described = await s1.call(65, 0, {"transactional_ids": [tid]})
        assert described["transaction_states"][0]["transaction_state"] in ("PrepareCommit", "CompleteCommit")
