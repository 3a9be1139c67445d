"""Transactions V2 (KIP-890 part 2) and the `transaction.version` feature, the same scenarios on a real
Kafka 4.4 broker and on the gateway, both at transaction.version 2: the broker is raised to it
with UpdateFeatures for this module and set back to 1 after, so the other tests keep comparing V1."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.formats.records import BatchBuilder
from tests.conftest import eventually, flush, kafka_bootstrap, running_gateway, test_config
from tests.differential import Side, compare, coordinators_ready, side
from tests.kafka_differences import normalise, plain
from tests.kafka_jvm import allowed, java
from tests.test_kafka_differential import create, list_offsets, timed_out_producer_carries_on, visible
from tests.test_kafka_differential import described_txn as _described
from tests.test_kafka_differential import txn_completed as _completed

pytestmark = [pytest.mark.kafka]

T0 = int(time.time() * 1000)  # now: a record older than retention.ms would be deleted on Kafka
UPGRADE, SAFE_DOWNGRADE = 1, 2


async def _features(s: Side) -> dict[str, int]:
    answer = await s.call(18, 4, {"client_software_name": "test", "client_software_version": "1"})
    return {f["name"]: f["max_version_level"] for f in answer["finalized_features"]}


async def _set_level(s: Side, level: int, upgrade_type: int) -> Any:
    answer = await s.call(57, 1, {"timeout": 10_000, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": level, "upgrade_type": upgrade_type}],
        "validate_only": False})
    assert answer["error_code"] == 0, answer
    await eventually(lambda: _level_is(s, level), 30, f"transaction.version {level}")
    return answer


async def _level_is(s: Side, level: int) -> bool:
    return (await _features(s)).get("transaction.version", 0) == level


@pytest.fixture(scope="module")
async def kafka_v2(kafka_broker: Any) -> AsyncIterator[str]:
    async with side("kafka", kafka_broker.bootstrap) as s:
        await coordinators_ready(s)
        await _set_level(s, 2, UPGRADE)
    yield str(kafka_broker.bootstrap)
    async with side("kafka", kafka_broker.bootstrap) as s:
        await _set_level(s, 1, SAFE_DOWNGRADE)


@pytest.fixture(scope="module")
async def gateway_v2(redis_server: str) -> AsyncIterator[str]:
    flush(redis_server)
    async with running_gateway(test_config(redis_server)) as gw, side("gateway", kafka_bootstrap(gw)) as s:
        assert "transaction.version" not in await _features(s)  # none finalized until an admin sets it
        await _set_level(s, 2, UPGRADE)
        yield kafka_bootstrap(gw)


def _batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
    b.append(value, b"k", [], T0)
    return b.build()


async def _produce(s: Side, tid: str, topic: str, pid: int, epoch: int, seq: int, value: bytes) -> Any:
    """Produce v12 of one transactional record: no AddPartitionsToTxn before it, under V2."""
    answer = await s.call(0, 12, {"transactional_id": tid, "acks": -1, "timeout": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": _batch(pid, epoch, seq, value)}]}]})
    return answer["responses"][0]["partition_responses"][0]


async def _end(s: Side, tid: str, pid: int, epoch: int, commit: bool) -> Any:
    return await s.call(26, 5, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                "committed": commit})


async def v2_epoch_bumps_and_late_produce_is_fenced(s: Side, name: str) -> Any:
    """EndTxn v5 answers the next epoch; a produce of the epoch before it, after the abort, is fenced
    (the hanging-transaction defence); the next epoch's produce opens the next transaction; an EndTxn
    retried with the epoch before the bump is answered as the first was (KIP-890's retry)."""
    await create(s, name, 1)
    init = await s.call(22, 5, {"transactional_id": name, "transaction_timeout": 60_000, "producer_id": -1,
                                "producer_epoch": -1})
    pid, e = init["producer_id"], init["producer_epoch"]
    out: list[Any] = [init]
    out.append(await _produce(s, name, name, pid, e, 0, b"aborted"))
    out.append(await _described(s, name))
    aborted = await _end(s, name, pid, e, False)
    out += [aborted, aborted["producer_epoch"] - e]
    await _completed(s, name, "CompleteAbort")
    out.append(await _produce(s, name, name, pid, e, 1, b"late"))
    e1 = aborted["producer_epoch"]
    out.append(await _produce(s, name, name, pid, e1, 0, b"committed"))
    committed = await _end(s, name, pid, e1, True)
    out += [committed, committed["producer_epoch"] - e1]
    await _completed(s, name, "CompleteCommit")
    out.append(await _end(s, name, pid, e1, True))  # the retry
    out.append(await _end(s, name, pid, e1, False))  # the other outcome, from the old epoch
    await eventually(lambda: _stable(s, name), 30, "the markers")
    out.append(await _described(s, name))
    out.append([await visible(s, name, isolation) for isolation in (1, 0)])
    return out


async def timed_out_abort_fences_the_producer(s: Side, name: str) -> Any:
    """A transaction left open past its timeout is aborted by the coordinator, which fences its
    producer as it does so (TransactionCoordinator.abortTimedOutTransactions): the late produce of
    the epoch it had is refused and opens no transaction, so is its EndTxn; the next InitProducerId
    answers the epoch after the fence's. Epochs are
    given as steps from the first."""
    await create(s, name, 1)
    init = await s.call(22, 5, {"transactional_id": name, "transaction_timeout": 1_000, "producer_id": -1,
                                "producer_epoch": -1})
    pid, e = init["producer_id"], init["producer_epoch"]
    out: list[Any] = [init, await _produce(s, name, name, pid, e, 0, b"timed out")]
    await _completed(s, name, "CompleteAbort")
    state, epoch, topics = await _described(s, name)
    out += [(state, epoch - e, topics), await _produce(s, name, name, pid, e, 1, b"late")]
    out.append((await _described(s, name))[0])
    out.append(await _end(s, name, pid, e, True))
    fresh = await s.call(22, 5, {"transactional_id": name, "transaction_timeout": 60_000, "producer_id": -1,
                                 "producer_epoch": -1})
    out += [fresh["error_code"], fresh["producer_epoch"] - e]
    await eventually(lambda: _stable(s, name), 30, "the markers")
    out.append([await visible(s, name, isolation) for isolation in (1, 0)])
    return out


async def _stable(s: Side, topic: str) -> bool:
    """The last stable offset at the high watermark: every marker written (Kafka writes them after
    EndTxn answers)."""
    ends = [(await list_offsets(s, topic, -1, isolation=i))["topics"][0]["partitions"][0]["offset"] for i in (0, 1)]
    return ends[0] == ends[1]


async def v2_txn_offset_commit_adds_the_group(s: Side, name: str) -> Any:
    """TxnOffsetCommit v5 with no AddOffsetsToTxn: the group joins the transaction, whose commit
    applies the offsets."""
    await create(s, name, 1)
    init = await s.call(22, 5, {"transactional_id": name, "transaction_timeout": 60_000, "producer_id": -1,
                                "producer_epoch": -1})
    pid, e = init["producer_id"], init["producer_epoch"]
    await eventually(lambda: _group_coordinator(s, name), 30, "the group coordinator")
    commit = await s.call(28, 5, {"transactional_id": name, "group_id": name, "producer_id": pid,
                                  "producer_epoch": e, "generation_id": -1, "member_id": "",
                                  "group_instance_id": None, "topics": [
                                      {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                                     "committed_leader_epoch": -1,
                                                                     "committed_metadata": ""}]}]})
    state, epoch, topics = await _described(s, name)
    # Kafka names the group's offsets partition among the transaction's; the gateway has no such topic
    allowed("Internal topics (`__consumer_offsets`, `__transaction_state`, `__share_group_state`) in Metadata of "
            "every topic")
    described = state, epoch, [t for t in topics if t["topic"] != "__consumer_offsets"]
    ended = await _end(s, name, pid, e, True)

    async def fetched() -> Any:
        got = await s.call(9, 8, {"groups": [{"group_id": name, "topics": [{"name": name, "partition_indexes": [0]}]}],
                                  "require_stable": True})
        part = got["groups"][0]["topics"][0]["partitions"][0]
        return got if part["error_code"] == 0 and part["committed_offset"] == 7 else None

    return [commit, described, ended, await eventually(fetched, 30, "the committed offset")]


async def _group_coordinator(s: Side, group: str) -> bool:
    found = await s.call(10, 4, {"key_type": 0, "coordinator_keys": [group]})
    return bool(found["coordinators"][0]["error_code"] == 0)


async def v2_update_features_refusals(s: Side, name: str) -> Any:
    """UpdateFeatures as Kafka's controller judges it: the level it is at, a downgrade asked as an
    upgrade, an upgrade asked as a downgrade, a level past the supported ones, a negative one, a
    validated safe downgrade (nothing changes), each in v0, v1 and v2's shapes."""
    asks = [(2, UPGRADE), (1, UPGRADE), (1, 3), (3, UPGRADE), (-1, SAFE_DOWNGRADE)]
    out = []
    for level, kind in asks:
        for v in (1, 2):
            out.append(await s.call(57, v, {"timeout": 10_000, "validate_only": True, "feature_updates": [
                {"feature": "transaction.version", "max_version_level": level, "upgrade_type": kind}]}))
    out.append(await s.call(57, 0, {"timeout": 10_000, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": 1, "allow_downgrade": False}]}))
    out.append(await s.call(57, 1, {"timeout": 10_000, "validate_only": True, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": 1, "upgrade_type": SAFE_DOWNGRADE}]}))
    out.append((await _features(s)).get("transaction.version"))
    return out


async def v2_timed_out_producer_carries_on(s: Side, name: str) -> Any:
    return await timed_out_producer_carries_on(s, name, v2=True)


@pytest.mark.parametrize("scenario", [v2_epoch_bumps_and_late_produce_is_fenced, v2_txn_offset_commit_adds_the_group,
                                      v2_update_features_refusals, timed_out_abort_fences_the_producer,
                                      v2_timed_out_producer_carries_on],
                         ids=lambda f: f.__name__)
async def test_kafka_and_the_gateway_answer_alike_on_v2(scenario: Any, kafka_v2: str, gateway_v2: str) -> None:
    await compare(scenario, kafka_v2, gateway_v2, scenario.__name__.replace("_", "-")[:30])


async def _clients_scenario(bs: str, tid: str, client: str) -> Any:
    """Transactions committed and aborted by `client`'s own producer, then what read_committed reads
    and the producer epoch its transactional.id ends at: the epoch moves at every end under V2 alone."""
    async with side("either", bs) as s:
        await create(s, tid, 1)
        if client == "java":
            ran = await java("gateway.jvm.Produce", bs, tid, "commit:2,abort:2,commit:2", f"transactional.id={tid}",
                             "acks=all")
            produced = ran.lines()
        else:
            produced = await asyncio.to_thread(_confluent_transactions, bs, tid)
        await _completed(s, tid, "CompleteCommit")
        await eventually(lambda: _stable(s, tid), 30, "the markers")
        return produced, await _described(s, tid), await visible(s, tid, 1)


def _confluent_transactions(bs: str, tid: str, topic: str = "") -> list[str]:
    import confluent_kafka as ck

    p = ck.Producer({"bootstrap.servers": bs, "transactional.id": tid, "linger.ms": 0})
    p.init_transactions(30)
    out = []
    for i, commit in enumerate((True, False, True)):
        p.begin_transaction()
        for j in range(2):
            p.produce(topic or tid, value=b"v%d-%d" % (i, j), key=b"k")
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
        out.append("commit" if commit else "abort")
    return out


@pytest.mark.jvm
@pytest.mark.parametrize("client", ["java", "confluent-kafka"])
async def test_clients_run_transactions_alike_on_v2(client: str, kafka_v2: str, gateway_v2: str) -> None:
    """Kafka 4.4's Java producer speaks V2 where the feature is finalized at 2 (its epoch moves at
    every EndTxn); librdkafka, which speaks V1 alone, keeps working there. Either way both brokers
    answer the same, and read_committed reads the committed records once."""
    tid = f"clients-{client}-{uuid.uuid4().hex[:8]}"
    on_kafka = await _clients_scenario(kafka_v2, tid, client)
    on_gateway = await _clients_scenario(gateway_v2, tid, client)
    assert normalise(plain(on_gateway)) == normalise(plain(on_kafka))
    assert len(on_kafka[2]) == 4  # the two committed transactions' records, once each
    # three transactions ended: V2 moved the epoch three times (from 0), V1 never
    assert on_kafka[1][1] == (3 if client == "java" else 0)


async def _side_by_side(bs: str, topic: str) -> Any:
    """Kafka's Java producer (V2) and confluent-kafka's (V1) each commit, abort and commit
    transactions on one partition at the same time: what read_committed reads and the epoch each
    transactional.id ends at."""
    async with side("either", bs) as s:
        await create(s, topic, 1)
        java_tid, ck_tid = f"{topic}-java", f"{topic}-ck"
        await asyncio.gather(
            java("gateway.jvm.Produce", bs, topic, "commit:2,abort:2,commit:2", f"transactional.id={java_tid}",
                 "acks=all"),
            asyncio.to_thread(_confluent_transactions, bs, ck_tid, topic))
        for tid in (java_tid, ck_tid):
            await _completed(s, tid, "CompleteCommit")
        await eventually(lambda: _stable(s, topic), 30, "the markers")
        return (sorted(value for _, _, value in await visible(s, topic, 1)),
                [(await _described(s, tid))[1] for tid in (java_tid, ck_tid)])


@pytest.mark.jvm
async def test_confluent_kafka_on_v1_beside_a_java_producer_on_v2(kafka_v2: str, gateway_v2: str) -> None:
    """On a cluster at transaction.version 2, librdkafka (V1 alone: AddPartitionsToTxn, no epoch
    bump at EndTxn) and Kafka's Java producer (V2) run transactions on the same partition at once,
    each open transaction holding back the other's committed records until it ends: both brokers
    give read_committed the four committed records of each, none aborted, and end the Java
    producer's epoch three bumps on and librdkafka's where it began."""
    topic = f"side-by-side-{uuid.uuid4().hex[:8]}"
    on_kafka = await _side_by_side(kafka_v2, topic)
    assert on_kafka == (sorted([b"commit-0", b"commit-1", b"commit-4", b"commit-5",
                                b"v0-0", b"v0-1", b"v2-0", b"v2-1"]), [3, 0])
    assert await _side_by_side(gateway_v2, topic) == on_kafka
