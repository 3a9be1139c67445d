"""Kafka transactions with the real clients: atomic produce, read_committed, fencing, timeouts,
and consume-transform-produce exactly once."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka as ck
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from gateway.errors import StorageUnavailable
from gateway.formats.records import BatchBuilder, build_control_batch
from tests.conftest import flush, kafka_bootstrap

REDIS_BACKENDS = ("single", "cluster")  # see conftest: each test runs on one Redis and on a cluster

pytestmark = pytest.mark.kafka
TIMEOUT = 30.0


def ck_txn_producer(bs: str, tid: str, **extra: object) -> ck.Producer:
    p = ck.Producer({"bootstrap.servers": bs, "transactional.id": tid, "partitioner": "murmur2_random",
                     "transaction.timeout.ms": 10_000, "linger.ms": 5, **extra})
    p.init_transactions(TIMEOUT)
    return p


def ck_read(bs: str, topic: str, partitions: int, isolation: str, expect: int, *, settle: float = 0.0) -> list[bytes]:
    """Values of every partition from the start; stops at `expect` records (then waits `settle` for extras)."""
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": f"reader-{time.monotonic_ns()}",
                     "enable.auto.commit": False, "isolation.level": isolation})
    c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(out) < expect and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
        end = time.monotonic() + settle
        while time.monotonic() < end:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                out.append(m.value())
    finally:
        c.close()
    return out


async def test_commit_and_abort_across_topics_with_confluent(gateway):
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic("ta", 2)
    await gateway.services.log.create_topic("tb", 1)

    def run() -> None:
        p = ck_txn_producer(bs, "tx-basic")
        p.begin_transaction()
        for i in range(10):
            p.produce("ta", key=b"k%d" % i, value=b"committed-a-%d" % i)
            p.produce("tb", value=b"committed-b-%d" % i)
        p.commit_transaction(TIMEOUT)
        p.begin_transaction()
        for i in range(5):
            p.produce("ta", key=b"k%d" % i, value=b"aborted-%d" % i)
        p.flush(TIMEOUT)
        p.abort_transaction(TIMEOUT)
        p.begin_transaction()
        p.produce("ta", key=b"k0", value=b"last")
        p.commit_transaction(TIMEOUT)

    await asyncio.to_thread(run)
    committed = await asyncio.to_thread(ck_read, bs, "ta", 2, "read_committed", 11, settle=0.5)
    assert sorted(committed) == sorted([b"committed-a-%d" % i for i in range(10)] + [b"last"])
    uncommitted = await asyncio.to_thread(ck_read, bs, "ta", 2, "read_uncommitted", 16, settle=0.5)
    assert sum(v.startswith(b"aborted") for v in uncommitted) == 5
    assert len(await asyncio.to_thread(ck_read, bs, "tb", 1, "read_committed", 10)) == 10
    for p in range(2):
        sl = await gateway.services.log.read("ta", p, 0, 1000)
        assert sl.stable == sl.high_watermark  # nothing left open


async def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction(gateway):
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic("fenced", 1)

    def run() -> str:
        old = ck_txn_producer(bs, "tx-zombie")
        old.begin_transaction()
        old.produce("fenced", value=b"zombie")
        old.flush(TIMEOUT)
        new = ck_txn_producer(bs, "tx-zombie")  # aborts the open transaction of the old epoch
        new.begin_transaction()
        new.produce("fenced", value=b"fresh")
        new.commit_transaction(TIMEOUT)
        try:
            old.produce("fenced", value=b"zombie-2")
            old.commit_transaction(TIMEOUT)
        except ck.KafkaException as exc:
            return exc.args[0].name()
        return "no error"

    error = await asyncio.to_thread(run)
    assert error in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), error
    assert await asyncio.to_thread(ck_read, bs, "fenced", 1, "read_committed", 1, settle=0.5) == [b"fresh"]


async def test_an_abandoned_transaction_times_out_and_the_stable_offset_moves_on(gateway):
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic("stall", 1)

    def abandon() -> None:
        p = ck_txn_producer(bs, "tx-abandoned", **{"transaction.timeout.ms": 1000})
        p.begin_transaction()
        p.produce("stall", value=b"never committed")
        p.flush(TIMEOUT)
        # the producer process "dies" here: no commit, no abort

    await asyncio.to_thread(abandon)
    await gateway.services.log.append([("stall", 0, _plain(b"after"))])
    got = await asyncio.to_thread(ck_read, bs, "stall", 1, "read_committed", 1, settle=0.3)
    assert got == [b"after"]  # the reaper aborted it, so the LSO passed it


def _plain(value: bytes) -> bytes:
    from gateway.formats.records import BatchBuilder

    b = BatchBuilder()
    b.append(value)
    return b.build()


async def test_aiokafka_transactions_and_read_committed(gateway):
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic("aio-tx", 1)
    producer = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-tx-1")
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(5):
                await producer.send("aio-tx", b"ok-%d" % i)
        await producer.begin_transaction()
        await producer.send("aio-tx", b"dropped")
        await producer.abort_transaction()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bs, isolation_level="read_committed", enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition("aio-tx", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 5 and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=300)
            got += [r.value for r in batch.get(tp, [])]
        extra = await consumer.getmany(tp, timeout_ms=300)
        assert got == [b"ok-%d" % i for i in range(5)] and not extra.get(tp)
    finally:
        await consumer.stop()


async def test_consume_transform_produce_exactly_once_with_confluent(gateway):
    """Each input is transformed into exactly one committed output, though a run aborts half-way."""
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic("ctp-in", 2)
    await gateway.services.log.create_topic("ctp-out", 2)

    def run() -> None:
        src = ck.Producer({"bootstrap.servers": bs, "partitioner": "murmur2_random"})
        for i in range(40):
            src.produce("ctp-in", key=b"%d" % i, value=b"in-%d" % i)
        assert src.flush(TIMEOUT) == 0

        def worker(abort_after: int | None, remaining: int = 40) -> int:
            consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": "ctp", "enable.auto.commit": False,
                                    "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                                    "session.timeout.ms": 6000})
            consumer.subscribe(["ctp-in"])
            producer = ck_txn_producer(bs, "ctp-worker")
            done = 0
            deadline = time.monotonic() + TIMEOUT
            try:
                # the resumed worker runs until it has committed what the crashed one left: an empty poll
                # proves nothing while the group is still assigning or a partition's fetch is on its way
                while time.monotonic() < deadline and done < remaining:
                    msgs = [m for m in consumer.consume(10, 0.5) if m.error() is None]
                    if not msgs:
                        continue
                    producer.begin_transaction()
                    for m in msgs:
                        producer.produce("ctp-out", key=m.key(), value=m.value().replace(b"in", b"out"))
                    producer.send_offsets_to_transaction(
                        consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), TIMEOUT)
                    if abort_after is not None and done >= abort_after:
                        producer.abort_transaction(TIMEOUT)
                        return done
                    producer.commit_transaction(TIMEOUT)
                    done += len(msgs)
            finally:
                consumer.close()
            return done

        first = worker(abort_after=10)  # processes some, then a batch is aborted and the worker "crashes"
        worker(abort_after=None, remaining=40 - first)  # a new incarnation resumes from the committed offsets

    await asyncio.to_thread(run)
    out = await asyncio.to_thread(ck_read, bs, "ctp-out", 2, "read_committed", 40, settle=0.5)
    assert sorted(out) == sorted(b"out-%d" % i for i in range(40))


async def test_consume_transform_produce_exactly_once_with_aiokafka(gateway):
    bs = kafka_bootstrap(gateway)
    await gateway.services.log.create_topic("aio-in", 2)
    await gateway.services.log.create_topic("aio-out", 1)
    seed = AIOKafkaProducer(bootstrap_servers=bs)
    await seed.start()
    try:
        for i in range(30):
            await seed.send("aio-in", b"in-%d" % i, key=b"%d" % i)
        await seed.flush()
    finally:
        await seed.stop()

    async def worker(abort_after: int | None) -> None:
        consumer = AIOKafkaConsumer("aio-in", bootstrap_servers=bs, group_id="aio-ctp", enable_auto_commit=False,
                                    auto_offset_reset="earliest", isolation_level="read_committed")
        producer = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-ctp-worker")
        await consumer.start()
        await producer.start()
        done = 0
        try:
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500, max_records=7)
                records = [r for rs in batches.values() for r in rs]
                if not records:
                    if done:
                        return
                    continue
                await producer.begin_transaction()
                for r in records:
                    await producer.send("aio-out", r.value.replace(b"in", b"out"))
                offsets = {tp: rs[-1].offset + 1 for tp, rs in batches.items()}
                await producer.send_offsets_to_transaction(offsets, "aio-ctp")
                if abort_after is not None and done >= abort_after:
                    await producer.abort_transaction()
                    return
                await producer.commit_transaction()
                done += len(records)
        finally:
            await producer.stop()
            await consumer.stop()

    await worker(abort_after=7)
    await worker(abort_after=None)
    out = await asyncio.to_thread(ck_read, bs, "aio-out", 1, "read_committed", 30, settle=0.5)
    assert sorted(out) == sorted(b"out-%d" % i for i in range(30))


async def test_the_next_request_of_a_producer_finds_its_ended_transaction_complete(gateway):
    """EndTxn answers once its markers are written and records the outcome just after: the producer's
    next request, a describe or its next transaction, finds the last one complete, never ending."""
    await gateway.services.log.create_topic("ended", 1)
    producers = gateway.services.txn_producers
    pid, epoch = await producers.init("tx-ended", 10_000)
    for commit in (True, False, True):
        await producers.add_partitions("tx-ended", pid, epoch, [("ended", 0)])
        await producers.end("tx-ended", pid, epoch, commit)
        state = await producers.describe("tx-ended")
        assert state.kafka_state == ("CompleteCommit" if commit else "CompleteAbort")


async def test_partitions_added_after_redis_lost_its_scripts_expect_the_transaction(gateway, redis_url):
    """AddPartitionsToTxn tells the partitions to expect the producer's batches, then adds them to
    its transaction, in one pipeline on one Redis. After a SCRIPT FLUSH nothing of it is sent again
    out of order: it is refused retriably (or, where redis-py serves it, loads the scripts), and
    sent again it leaves the partitions expecting the transaction's first batch (KIP-890 part 1)."""
    await gateway.services.log.create_topic("flushed-add", 2)
    producers = gateway.services.txn_producers
    pid, epoch = await producers.init("tx-flushed", 10_000)
    flush(redis_url, data=False)
    parts = [("flushed-add", 0), ("flushed-add", 1)]
    for _attempt in range(2):
        try:
            await producers.add_partitions("tx-flushed", pid, epoch, parts, verified=True)
            break
        except StorageUnavailable:
            continue
    else:
        raise AssertionError("adding the partitions never succeeded")
    batch = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
    batch.append(b"v")
    done = await gateway.services.log.append([(t, p, batch.build()) for t, p in parts], verify_txn=True)
    assert [d.result.base_offset for d in done] == [0, 0]
    await producers.end("tx-flushed", pid, epoch, True)
    assert (await producers.describe("tx-flushed")).kafka_state == "CompleteCommit"


@pytest.mark.parametrize("later", [1, 2])
async def test_a_late_marker_of_a_transaction_leaves_its_producers_next_one_alone(gateway, later):
    """Two gateways may roll the same V1 commit forward (its coordinator, and another's reaper that
    found it decided); the later one's marker can land once the producer has begun its next
    transaction on the partition, under the same producer id and epoch (V1 keeps the epoch). That
    marker must not end the next transaction: its records stay unstable until its own end, and its
    abort hides them (the soak's cluster:743120363: read_committed consumers read an aborted
    transaction's records). Held back longer, it lands once the next one has ended too and a third
    has begun here (`later` 2): still nothing of the one open there ends."""
    topic, tid = f"late-marker-{later}", f"tx-late-{later}"
    await gateway.services.log.create_topic(topic, 1)
    producers = gateway.services.txn_producers
    pid, epoch = await producers.init(tid, 10_000)

    async def write(value: bytes, seq: int) -> int:
        await producers.add_partitions(tid, pid, epoch, [(topic, 0)], verified=True)
        b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
        b.append(value)
        [done] = await gateway.services.log.append([(topic, 0, b.build())], verify_txn=True)
        assert not isinstance(done.result, Exception), done.result
        return done.result.base_offset

    await write(b"first", 0)
    first = (await producers.describe(tid)).txn
    assert first is not None
    await producers.end(tid, pid, epoch, True)
    for n in range(1, later):
        await write(b"between", n)
        await producers.end(tid, pid, epoch, True)
    second = await write(b"second", later)
    # the first transaction's commit marker written again, late, as the other roll-forward writes it
    await producers.coordinator.txns.write_markers([(topic, 0)], pid, epoch, True,
                                                   build_control_batch(True, pid, epoch), txn_id=first.txn_id)
    [bounds] = await gateway.services.log.partition_bounds(topic)
    assert bounds.last_stable_offset == second  # the transaction open there still is
    await producers.end(tid, pid, epoch, False)
    [bounds] = await gateway.services.log.partition_bounds(topic)
    assert bounds.last_stable_offset == bounds.high_watermark
    batch = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=later + 1, transactional=True)
    batch.append(b"after its end")
    [late] = await gateway.services.log.append([(topic, 0, batch.build())], verify_txn=True)
    assert isinstance(late.result, Exception)  # no transaction is open: nothing opens one here
