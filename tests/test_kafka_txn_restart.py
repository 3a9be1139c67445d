"""A confluent-kafka consume-transform-produce loop through a SIGKILL and restart of its only gateway.

librdkafka 2.10 and later re-bootstrap when every broker they know is down: the brokers learnt from
Metadata are dropped, but a group coordinator cached for `send_offsets_to_transaction` stays
pointed at the dropped one, so the next call waits for it forever, past its own timeout
(librdkafka issues 5511 and 5456). With `metadata.recovery.strategy=none` nothing is dropped: the
restarted gateway comes back at the same address with the same node id (the registry gives an
address its id back), the client's broker reconnects and the loop goes on, every input transformed
exactly once. README "Production" gives this advice; this test shows that it works.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.conftest import GatewayProcess
from tests.test_kafka_txn import ck_read, ck_txn_producer

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

RECOVERY = {"metadata.recovery.strategy": "none"}  # the advice: never drop the one gateway's broker
INPUTS = 60
BATCH = 10
TIMEOUT = 10.0
RUN_FOR = 60.0  # the whole loop, restart included; a stalled client fails the test here


def retried(call: Callable[[], None], attempts: int = 5) -> None:
    """`call` again while librdkafka calls its error retriable (a timeout while the gateway restarts)."""
    for _ in range(attempts - 1):
        try:
            return call()
        except ck.KafkaException as exc:
            if not exc.args[0].retriable():
                raise
    call()


def committed(producer: ck.Producer, consumer: ck.Consumer) -> bool:
    """Send the consumed offsets and commit; False when the transaction had to be aborted instead."""
    try:
        retried(lambda: producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), TIMEOUT))
        retried(lambda: producer.commit_transaction(TIMEOUT))
        return True
    except ck.KafkaException as exc:
        if not exc.args[0].txn_requires_abort():
            raise
        producer.abort_transaction(TIMEOUT)
        return False


def rewind(consumer: ck.Consumer) -> None:
    """Back to the committed offsets, so an aborted batch's inputs are transformed again."""
    for tp in consumer.committed(consumer.assignment(), TIMEOUT):
        consumer.seek(ck.TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else ck.OFFSET_BEGINNING))


def transform(
    bs: str, source: str, sink: str, group: str, inputs: int, *, after_batch: Callable[[int], None],
    acknowledged: bool = False, **consumer_conf: object,
) -> None:
    """Upper-case `source` into `sink` in transactions of up to BATCH inputs, until `inputs` are
    done; `after_batch(n)` is called with the nth batch produced (with `acknowledged`, its records
    acknowledged too) and not yet committed."""
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                            "auto.offset.reset": "earliest", "isolation.level": "read_committed", **RECOVERY,
                            **consumer_conf})
    producer = ck_txn_producer(bs, f"{group}-worker", **RECOVERY)
    consumer.subscribe([source])
    done, batches = 0, 0
    try:
        while done < inputs:
            msgs = [m for m in consumer.consume(BATCH, 0.5) if m.error() is None]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, key=m.key(), value=(m.value() or b"").upper())
            batches += 1
            if acknowledged:
                assert producer.flush(TIMEOUT) == 0
            after_batch(batches)
            if committed(producer, consumer):
                done += len(msgs)
            else:
                rewind(consumer)
    finally:
        consumer.close()


def restarting(gp: GatewayProcess, at: int) -> Callable[[int], None]:
    """With the `at`th batch produced and not yet committed, kill the gateway and start it again."""

    def after_batch(n: int) -> None:
        if n == at:
            gp.kill()  # mid-transaction: its records acknowledged, its offsets not
            gp.start()

    return after_batch


def test_a_transactional_loop_goes_on_exactly_once_when_its_only_gateway_restarts(
    gateway_process: GatewayProcess,
) -> None:
    gp = gateway_process
    gp.args += ["--log-level", "WARNING"]  # nothing reads its output: keep the pipe from filling
    gp.start()
    admin = AdminClient({"bootstrap.servers": gp.kafka_bootstrap})
    for f in admin.create_topics([NewTopic("restart-in", 3, 1), NewTopic("restart-out", 3, 1)]).values():
        f.result(TIMEOUT)
    seed = ck.Producer({"bootstrap.servers": gp.kafka_bootstrap, "enable.idempotence": True})
    for i in range(INPUTS):
        seed.produce("restart-in", key=b"%d" % i, value=b"word %d" % i)
    assert seed.flush(TIMEOUT) == 0

    failure: list[BaseException] = []

    def run() -> None:
        try:
            # killed with its records acknowledged: an AddPartitionsToTxn still in flight may die with the
            # gateway, and once a slow restart times the records out, the abort of a transaction never
            # begun is INVALID_TXN_STATE, fatal to librdkafka, from Kafka 4.4 too (test_kafka_differential's
            # end_txn_of_a_transaction_never_begun)
            transform(gp.kafka_bootstrap, "restart-in", "restart-out", "restart", INPUTS,
                      after_batch=restarting(gp, 2), acknowledged=True)
        except BaseException as exc:  # handed to the test's thread
            failure.append(exc)

    # librdkafka may block inside one call past its timeout: a thread of its own lets the test end
    worker = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(RUN_FOR)
    assert not worker.is_alive(), f"the loop stalled (still running after {time.monotonic() - started:.0f} s)"
    if failure:
        raise failure[0]
    out = ck_read(gp.kafka_bootstrap, "restart-out", 3, "read_committed", INPUTS, settle=0.5)
    assert sorted(out) == sorted(b"WORD %d" % i for i in range(INPUTS))
