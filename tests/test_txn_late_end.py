"""A transactional request held up on its way to Redis, which its producer sent again through another
gateway and went on from, must not act on the producer's state as it is by then. Found by
tests/jepsen's soak: a gateway cut off from Redis held a producer's EndTxn for 7.8 s, and the late
EndTxn then committed the producer's next transaction, its records without its offsets
(sentinel:659359618); a gateway 800 ms from Redis held an InitProducerId for 5.7 s, which then fenced
the producer its resend had made (cluster:625580613). The same holds for the requests that open a
transaction or stage its offsets. Each is refused CONCURRENT_TRANSACTIONS, retriable, when it reached
its gateway before the state it would act on came to be (Redis's clock)."""

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
GIVE_UP = 0.5
"""Seconds between a held request's arrival and its producer's resend: the producer gives up on it
first (librdkafka after its socket timeout, seconds in the soak), which puts its resend's step well
past the held one's arrival on the gateways' clock, whose readings of Redis's agree to within a few
milliseconds on a loaded machine."""


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
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:  # Redis gone (killed): the client finds its link refused, as without the relay
            writer.close()
            return
        await asyncio.gather(pump(reader, up_writer, not replies), pump(up_reader, writer, replies))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], flowing, held
    finally:
        server.close()


@contextlib.asynccontextmanager
async def two_gateways(redis_server: str, prefix: str,
                       ) -> AsyncIterator[tuple[str, Side, Side, asyncio.Event, asyncio.Event]]:
    """(transactional.id, g1's side, g2's, `flowing`, `held`): g1 on Redis, g2 through a relay that
    holds what it sends while `flowing` is clear (`holding_relay`), and a topic named as the
    transactional.id, so that g2's first held step for that producer sets `held`."""
    flush(redis_server)
    tid = f"{prefix}-{uuid.uuid4().hex[:8]}"
    redis_port = urlparse(redis_server).port
    assert redis_port is not None
    async with holding_relay(redis_port, tid.encode()) as (relay_port, flowing, held), \
            running_gateway(test_config(redis_server)) as g1, \
            running_gateway(test_config(f"redis://127.0.0.1:{relay_port}")) as g2, \
            side("g1", kafka_bootstrap(g1)) as s1, side("g2", kafka_bootstrap(g2)) as s2:
        await create(s1, tid, 1)
        yield tid, s1, s2, flowing, held


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
    async with two_gateways(redis_server, "late-end") as (tid, s1, s2, flowing, held):
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


async def _init(s: Side, tid: str) -> tuple[int, int, int]:
    """A new producer's InitProducerId v4: (error code, producer id, epoch)."""
    answer = await s.call(22, 4, {"transactional_id": tid, "transaction_timeout": 60_000, "producer_id": -1,
                                  "producer_epoch": -1})
    return int(answer["error_code"]), int(answer["producer_id"]), int(answer["producer_epoch"])


async def test_an_init_producer_id_held_up_on_its_way_to_redis_does_not_fence_the_producer_its_resend_made(
        redis_server: str) -> None:
    """The soak's cluster:625580613: a producer's InitProducerId to g2 held 5.7 s behind a slow link to
    Redis; librdkafka gave up on it and sent it again through g1, and went on with the epoch g1 gave.
    Let through, the held one arrived before that epoch was handed out: refused CONCURRENT_TRANSACTIONS
    (a retry, to a producer long past it), the epoch left as it is, and the producer carries on."""
    async with two_gateways(redis_server, "late-init") as (tid, s1, s2, flowing, held):
        assert (await _init(s1, tid))[0] == 0  # the transactional.id's first producer, long gone
        flowing.clear()
        late = asyncio.create_task(_init(s2, tid))
        await held.wait()  # g2's step for it is on its way to Redis, held
        await asyncio.sleep(GIVE_UP)  # the producer gives up on it
        code, pid, epoch = await _init(s1, tid)  # the producer's resend through g1
        assert code == 0
        flowing.set()
        assert (await late)[0] == CONCURRENT_TRANSACTIONS
        await _begin_and_produce(s1, tid, pid, epoch, 0, b"carried on")  # not fenced
        assert await _end(s1, tid, pid, epoch) == 0
        # sent again now, as the producer that gave up on it would: a new producer, fencing the last
        code, _, newer = await _init(s2, tid)
        assert (code, newer) == (0, epoch + 1)


async def test_an_add_partitions_held_up_on_its_way_to_redis_opens_no_transaction_after_the_one_it_meant(
        redis_server: str) -> None:
    """An AddPartitionsToTxn held on g2's link to Redis while the producer, through g1, added the
    partition and committed: let through, it would open a transaction the producer knows nothing of,
    which its timeout aborts and fences the producer with. It arrived before the transaction it was
    meant for was decided: refused CONCURRENT_TRANSACTIONS, and no transaction is open."""
    async with two_gateways(redis_server, "late-add") as (tid, s1, s2, flowing, held):
        code, pid, epoch = await _init(s1, tid)
        assert code == 0
        add = {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
               "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": tid, "partitions": [0]}]}
        flowing.clear()
        late = asyncio.create_task(s2.call(24, 3, add))
        await held.wait()  # g2's step for it is on its way to Redis, held
        await asyncio.sleep(GIVE_UP)  # the producer gives up on it
        await _begin_and_produce(s1, tid, pid, epoch, 0, b"first")  # the producer's resend through g1
        assert await _end(s1, tid, pid, epoch) == 0
        flowing.set()
        answer = await late
        assert [r["partition_error_code"] for t in answer["results_by_topic_v3_and_below"]
                for r in t["results_by_partition"]] == [CONCURRENT_TRANSACTIONS]
        described = await s1.call(65, 0, {"transactional_ids": [tid]})
        assert described["transaction_states"][0]["transaction_state"] in ("PrepareCommit", "CompleteCommit")
        await _begin_and_produce(s1, tid, pid, epoch, 1, b"second")  # its next, timely, opens one
        described = await s1.call(65, 0, {"transactional_ids": [tid]})
        assert described["transaction_states"][0]["transaction_state"] == "Ongoing"


async def _commit_offset(s: Side, tid: str, pid: int, epoch: int, group: str, offset: int) -> int:
    """TxnOffsetCommit v3 (transactions V1) of t-0's `offset` for `group`: its error code."""
    answer = await s.call(28, 3, {"transactional_id": tid, "group_id": group, "producer_id": pid,
                                  "producer_epoch": epoch, "generation_id": -1, "member_id": "",
                                  "group_instance_id": None, "topics": [{"name": tid, "partitions": [
                                      {"partition_index": 0, "committed_offset": offset,
                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return int(answer["topics"][0]["partitions"][0]["error_code"])


async def test_a_txn_offset_commit_held_up_on_its_way_to_redis_stages_nothing_in_the_next_transaction(
        redis_server: str) -> None:
    """A TxnOffsetCommit held on g2's link to Redis while the producer, through g1, committed those
    offsets and went on to its next transaction with the group in it: let through, it would stage its
    older offsets in that one, and the group's committed offset would go back. It arrived before that
    transaction opened: refused CONCURRENT_TRANSACTIONS, and the group commits the newer offset."""
    async with two_gateways(redis_server, "late-offsets") as (tid, s1, s2, flowing, held):
        group = f"{tid}-group"
        code, pid, epoch = await _init(s1, tid)
        assert code == 0
        add_offsets = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "group_id": group}
        for seq, offset in ((0, 5), (1, 10)):
            await _begin_and_produce(s1, tid, pid, epoch, seq, b"v%d" % seq)
            assert (await s1.call(25, 3, add_offsets))["error_code"] == 0
            if offset == 5:
                flowing.clear()
                late = asyncio.create_task(_commit_offset(s2, tid, pid, epoch, group, 5))
                await held.wait()  # g2's step for it is on its way to Redis, held
                await asyncio.sleep(GIVE_UP)  # the producer gives up on it
            assert await _commit_offset(s1, tid, pid, epoch, group, offset) == 0  # (the first: the resend)
            if offset == 10:
                flowing.set()
                assert await late == CONCURRENT_TRANSACTIONS
            assert await _end(s1, tid, pid, epoch) == 0
        fetched = await s1.call(9, 7, {"group_id": group, "topics": [{"name": tid, "partition_indexes": [0]}],
                                       "require_stable": True})
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 10
