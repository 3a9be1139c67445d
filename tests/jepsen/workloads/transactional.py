"""Consume-transform-produce in transactions: a source writes input values; a worker consumes them
(group, read_committed), writes one output value per input to random partitions and commits its input
offsets in the same transaction (send_offsets_to_transaction), aborting some on purpose and rewinding
to re-process them; a reader polls the output read_committed throughout; then the final read.

    python -m tests.jepsen.workloads.transactional --bootstrap H:P[,H:P] --history FILE --seconds N --seed S
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as Stuck
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from tests.jepsen.history import History
from tests.jepsen.workloads.common import Feed, arguments, create, final_read, record

SOURCE, WORKER, READER = "source", "worker", "reader"
ABORTS = 0.25  # the share of transactions aborted on purpose
TIMEOUT = 60.0
STUCK = 3 * TIMEOUT  # a step not back by then hangs: a primary pause left send_offsets_to_transaction blocked
# send_offsets_to_transaction past its own timeout by this much waits on a group coordinator librdkafka
# decommissioned, for good (librdkafka issues 5511 and 5456; Kafka drops a fenced broker from Metadata too)
OFFSETS_GRACE = 30.0
ABANDONED: list[Producer] = []  # producers a thread stays blocked in, kept: destroying one would block too


# README "Production": a transactional librdkafka client keeps the brokers it learnt when all are
# down (a Sentinel failover drops every client at once), else the group coordinator it cached is
# dropped and send_offsets_to_transaction waits for it until the transaction times out
RECOVERY = {"metadata.recovery.strategy": "none",
            # ... and learns of a gateway back in Metadata within seconds, not librdkafka's 5 minutes: a
            # group coordinator dropped from Metadata (killed) is waited on until it is seen again
            # (librdkafka issue 5511)
            "topic.metadata.refresh.interval.ms": 5000}


class Worker:
    """The transactional side: one transaction per polled batch."""

    def __init__(self, args: argparse.Namespace, history: History, source: str, sink: str,
                 timeout: float = TIMEOUT) -> None:
        self.args, self.history, self.sink = args, history, sink
        self.rng = random.Random(args.seed)
        self.group = f"transactional-{args.seed}"
        self.consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": self.group,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed", **RECOVERY})
        self.consumer.subscribe([source])
        self.timeout = timeout
        self.producer = self._producer()
        self.n = 0
        self.lock = threading.Lock()  # between a step and `replace`: which producer's outcome is recorded
        self.generation = 0  # moved by `replace`: a step of an older one records and touches nothing more
        self.waiting: tuple[list[Message], dict[str, Any]] | None = None  # a step in send_offsets_to_transaction

    def _producer(self) -> Producer:
        """A transactional producer of the group's id: its init_transactions fences every earlier one."""
        producer = Producer({"bootstrap.servers": self.args.bootstrap, "transactional.id": self.group,
                             "linger.ms": 5, "request.timeout.ms": 10000, **RECOVERY,
                             # JEPSEN_RDKAFKA_DEBUG=eos,protocol: which request a stuck step waits on
                             **({"debug": debug} if (debug := os.environ.get("JEPSEN_RDKAFKA_DEBUG")) else {})})
        producer.init_transactions(self.timeout)
        return producer

    def step(self) -> None:
        got = [m for m in self.consumer.consume(50, 0.1) if m.error() is None]
        if not got:
            return
        reads = [record(m) for m in got]
        self.history.ok(WORKER, "poll", {"isolation": "read_committed", "records": reads})
        self.n += 1
        tid = f"{self.args.seed}-{self.n}"
        sends: dict[str, list[Any]] = {}

        def done(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                sends[record(msg)[3]] = list(record(msg))

        producer, generation = self.producer, self.generation
        producer.begin_transaction()
        planned: list[list[Any]] = []
        for _, _, _, read in reads:
            v, p = f"{read}@{tid}", self.rng.randrange(self.args.partitions)
            planned.append([self.sink, p, None, v])
            producer.produce(self.sink, value=v.encode(), partition=p, on_delivery=done)
        positions = self.consumer.position(self.consumer.assignment())
        offsets = [[tp.topic, tp.partition, tp.offset] for tp in positions if tp.offset >= 0]
        abort = self.rng.random() < ABORTS
        value = {"id": tid, "abort": abort, "reads": reads, "group": self.group, "offsets": offsets}
        self.waiting = (got, {**value, "sends": planned})
        try:
            producer.send_offsets_to_transaction(positions, self.consumer.consumer_group_metadata(), self.timeout)
        except KafkaException:
            value["abort"] = abort = True
        with self.lock:
            self.waiting = None
            if generation != self.generation:  # replaced while blocked: its transaction was aborted
                return
        try:
            producer.flush(self.timeout)  # the records in the log, aborted ones too, and their offsets known
        except KafkaException:
            value["abort"] = abort = True
        self.history.invoke(WORKER, "txn", {**value, "sends": planned})
        value["sends"] = [sends.get(v, [t, p, None, v]) for t, p, _, v in planned]
        if not abort:
            try:
                producer.commit_transaction(self.timeout)
                self.history.ok(WORKER, "txn", value)
                return
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    self.history.info(WORKER, "txn", {**value, "error": str(exc)})
                    raise
        try:
            producer.abort_transaction(self.timeout)
        except KafkaException as exc:
            self.history.info(WORKER, "txn", {**value, "error": str(exc)})
            raise
        self.history.fail(WORKER, "txn", value)
        self._rewind(got)

    def replace(self) -> bool:
        """Recover from a step blocked in send_offsets_to_transaction, as a user must: librdkafka ignores
        its timeout (issue 5456), and waits for good on a group coordinator it decommissioned when a
        Metadata answer left that broker out (issue 5511; Kafka leaves out a broker fenced after
        `broker.session.timeout.ms`, KRaftMetadataCache.getAliveBrokerNodes). A new producer of the
        same transactional.id fences the blocked one, whose transaction its coordinator then aborts
        if still open, and the batch is processed again. False where the step is blocked anywhere else."""
        with self.lock:
            if self.waiting is None:
                return False
            (got, value), self.waiting = self.waiting, None
            self.generation += 1
            ABANDONED.append(self.producer)
        self.history.invoke(WORKER, "txn", value)
        self.producer = self._producer()
        # unsure, not failed: the fence aborts a transaction still open, not one a late EndTxn ended
        self.history.info(WORKER, "txn", {**value, "error": "abandoned in send_offsets_to_transaction; fenced"})
        self._rewind(got)
        return True

    def _rewind(self, got: list[Message]) -> None:
        """Back to the first record of the aborted batch in each partition, to process it again."""
        first: dict[tuple[str, int], int] = {}
        for t, p, o, _ in map(record, got):
            first.setdefault((t, p), o)
        for (t, p), o in first.items():
            self.consumer.seek(TopicPartition(t, p, o))
        self.history.ok(WORKER, "seek", {"positions": [[t, p, o] for (t, p), o in first.items()]})

    def close(self) -> None:
        self.consumer.close()


class Watchdog:
    """The worker's steps, run on a thread under a watchdog: one blocked in
    send_offsets_to_transaction past its timeout is replaced (`Worker.replace`); one blocked anywhere,
    or still blocked, after `stuck` seconds is recorded `stuck` and abandoned, so that the run still
    ends in its final read."""

    def __init__(self, worker: Worker, stuck: float = STUCK, grace: float = OFFSETS_GRACE) -> None:
        self.worker, self.stuck, self.replaced = worker, stuck, 0
        self.patience = worker.timeout + grace  # for a step in send_offsets_to_transaction

    def step(self) -> bool:
        """One step; False once one is stuck."""
        step = _in_thread(self.worker.step)
        try:
            step.result(self.patience)
            return True
        except Stuck:
            if self.worker.replace():
                self.replaced += 1
                return True
        try:
            step.result(max(0.0, self.stuck - self.patience))
            return True
        except Stuck:
            self.worker.history.info(WORKER, "stuck", {"call": "a transaction's step", "seconds": self.stuck})
            return False


def _in_thread(call: Callable[[], None]) -> Future[None]:
    """`call` on a daemon thread of its own: one left blocked in librdkafka keeps no process from ending."""
    done: Future[None] = Future()

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to whoever waits on the step
            done.set_exception(exc)
        else:
            done.set_result(None)

    threading.Thread(target=run, daemon=True).start()
    return done


def main() -> None:
    args = arguments(__doc__ or "")
    rng = random.Random(args.seed)
    source, sink = f"txn-in-{args.seed}", f"txn-out-{args.seed}"
    with History(args.history) as history:
        create(args, source, sink)
        feed = Feed(args, history, source, SOURCE)
        reader = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"reader-{args.seed}",
                           "enable.auto.commit": False, "isolation.level": "read_committed"})
        reader.assign([TopicPartition(sink, p, 0) for p in range(args.partitions)])
        worker = Watchdog(Worker(args, history, source, sink))
        deadline, stuck = time.monotonic() + args.seconds, False
        try:
            while time.monotonic() < deadline and not stuck:
                feed.send(10, lambda _: rng.randrange(args.partitions))
                stuck = not worker.step()
                polled = [record(m) for m in reader.consume(500, 0) if m.error() is None]
                if polled:
                    history.ok(READER, "poll", {"isolation": "read_committed", "records": polled})
            feed.flush()
        finally:
            if not stuck:
                worker.worker.close()
            reader.close()
        final_read(history, args, source, sink)
    os._exit(0)  # not waiting for a stuck worker's thread


if __name__ == "__main__":
    main()
