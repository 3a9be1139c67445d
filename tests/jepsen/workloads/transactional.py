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
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as Stuck
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from tests.jepsen.history import History
from tests.jepsen.workloads.common import Feed, arguments, create, final_read, record

SOURCE, WORKER, READER = "source", "worker", "reader"
ABORTS = 0.25  # the share of transactions aborted on purpose
TIMEOUT = 60.0
STUCK = 3 * TIMEOUT  # a step not back by then hangs: a primary pause left send_offsets_to_transaction blocked


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

    def __init__(self, args: argparse.Namespace, history: History, source: str, sink: str) -> None:
        self.args, self.history, self.sink = args, history, sink
        self.rng = random.Random(args.seed)
        self.group = f"transactional-{args.seed}"
        self.consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": self.group,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed", **RECOVERY})
        self.consumer.subscribe([source])
        self.producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": self.group,
                                  "linger.ms": 5, "request.timeout.ms": 10000, **RECOVERY,
                                  # JEPSEN_RDKAFKA_DEBUG=eos,protocol: which request a stuck step waits on
                                  **({"debug": debug} if (debug := os.environ.get("JEPSEN_RDKAFKA_DEBUG")) else {})})
        self.producer.init_transactions(TIMEOUT)
        self.n = 0

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

        self.producer.begin_transaction()
        planned: list[list[Any]] = []
        for _, _, _, read in reads:
            v, p = f"{read}@{tid}", self.rng.randrange(self.args.partitions)
            planned.append([self.sink, p, None, v])
            self.producer.produce(self.sink, value=v.encode(), partition=p, on_delivery=done)
        positions = self.consumer.position(self.consumer.assignment())
        offsets = [[tp.topic, tp.partition, tp.offset] for tp in positions if tp.offset >= 0]
        abort = self.rng.random() < ABORTS
        try:
            self.producer.send_offsets_to_transaction(positions, self.consumer.consumer_group_metadata(), TIMEOUT)
            self.producer.flush(TIMEOUT)  # the records in the log, aborted ones too, and their offsets known
        except KafkaException:
            abort = True
        value = {"id": tid, "abort": abort, "reads": reads, "group": self.group, "offsets": offsets}
        self.history.invoke(WORKER, "txn", {**value, "sends": planned})
        value["sends"] = [sends.get(v, [t, p, None, v]) for t, p, _, v in planned]
        if not abort:
            try:
                self.producer.commit_transaction(TIMEOUT)
                self.history.ok(WORKER, "txn", value)
                return
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    self.history.info(WORKER, "txn", {**value, "error": str(exc)})
                    raise
        try:
            self.producer.abort_transaction(TIMEOUT)
        except KafkaException as exc:
            self.history.info(WORKER, "txn", {**value, "error": str(exc)})
            raise
        self.history.fail(WORKER, "txn", value)
        self._rewind(got)

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
        worker = Worker(args, history, source, sink)
        steps = ThreadPoolExecutor(1)  # the worker's calls, under a watchdog
        deadline, stuck = time.monotonic() + args.seconds, False
        try:
            while time.monotonic() < deadline and not stuck:
                feed.send(10, lambda _: rng.randrange(args.partitions))
                try:
                    steps.submit(worker.step).result(STUCK)
                except Stuck:  # recorded, and the worker abandoned, so that the run still ends in its final read
                    history.info(WORKER, "stuck", {"call": "a transaction's step", "seconds": STUCK})
                    stuck = True
                polled = [record(m) for m in reader.consume(500, 0) if m.error() is None]
                if polled:
                    history.ok(READER, "poll", {"isolation": "read_committed", "records": polled})
            feed.flush()
        finally:
            if not stuck:
                worker.close()
            reader.close()
        final_read(history, args, source, sink)
    os._exit(0)  # not waiting for a stuck worker's thread


if __name__ == "__main__":
    main()
