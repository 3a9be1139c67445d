"""What every workload shares: its command line, its topics' creation, and the final read."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from tests.jepsen.history import History
from tests.kafka_clients import create_topics_retried

FINAL = "final"  # the final read's process
READ_SECONDS = 120.0  # a final read not done by then, everything healed, is an anomaly
Record = tuple[str, int, int, str]  # topic, partition, offset, value: the checker's record


def record(m: Message) -> Record:
    t, p, o, v = m.topic(), m.partition(), m.offset(), m.value()
    assert t is not None and p is not None and o is not None and v is not None
    return t, p, o, v.decode()


def delivered(history: History, process: str | int) -> Callable[[KafkaError | None, Message], None]:
    """The delivery callback that completes a non-transactional `send`: ok where acknowledged; any
    error (a timeout first) leaves it unsure, `info`, since an idempotent retry may have written it.
    An acknowledgement may come without its offset (`o` null): librdkafka's idempotent producer
    reports a batch as persisted, offset unknown, when a retry finds it written before."""
    def done(err: KafkaError | None, msg: Message) -> None:
        v = msg.value()
        assert v is not None
        if err is None:
            history.ok(process, "send", {"v": v.decode(), "t": msg.topic(), "p": msg.partition(), "o": msg.offset()})
        else:
            history.info(process, "send", {"v": v.decode(), "error": str(err)})
    return done


class Feed:
    """An idempotent acks=all producer writing unique values to an input topic, each send recorded under
    `process`: what the consuming workloads (transactional, groups, share) read."""

    def __init__(self, args: argparse.Namespace, history: History, topic: str, process: str = "source") -> None:
        self.history, self.topic, self.process, self.partitions = history, topic, process, args.partitions
        self.producer = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 60000,
                                  # why librdkafka drains or bumps its epoch, as the idempotent workload's say
                                  **({"debug": debug} if (debug := os.environ.get("JEPSEN_RDKAFKA_DEBUG", "eos"))
                                     else {})})
        self.done = delivered(history, process)
        self.prefix, self.n = f"{topic}-", 0

    def send(self, count: int, partition: Callable[[int], int]) -> None:
        """`count` more values, the i-th of the run to `partition(i)`."""
        for _ in range(count):
            v, p = f"{self.prefix}{self.n}", partition(self.n)
            self.history.invoke(self.process, "send", {"v": v, "t": self.topic, "p": p})
            self.producer.produce(self.topic, value=v.encode(), partition=p, on_delivery=self.done)
            self.n += 1
        self.producer.poll(0)

    def flush(self) -> None:
        self.producer.flush(180)


def arguments(doc: str, *extra: tuple[str, dict[str, Any]]) -> argparse.Namespace:
    """The common flags, and a workload's own (`extra`: a flag and add_argument's options)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for flag, options in extra:
        parser.add_argument(flag, **options)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--native", help="the native listeners (unused by Kafka workloads)")
    parser.add_argument("--history", type=Path, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--min-insync-replicas", type=int, default=2,
                        help="2 on the lab's replicated Redis (the production setting); 1 on a lone Redis")
    return parser.parse_args()


def create(args: argparse.Namespace, *topics: str) -> None:
    """Create `topics` with `args.partitions` each, tried again for a minute while refused retriably
    (the faults cut a primary off from its replicas or take it away, or cut a gateway off)."""
    create_topics_retried(args.bootstrap, *topics, partitions=args.partitions,
                          config={"min.insync.replicas": str(args.min_insync_replicas)})


def high_watermark(c: Consumer, tp: TopicPartition) -> int:
    """The partition's high watermark, asked again for a minute while the faults' effects settle (the
    client's handle of a gateway that left the metadata destroyed under a request; a partition its
    metadata cache lost, "Unknown partition" until the topic's metadata is asked for again); then
    the error."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return int(c.get_watermark_offsets(tp, timeout=10)[1])
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise KafkaException(f"{tp.topic} {tp.partition}: {exc}") from exc
            try:
                c.list_topics(tp.topic, timeout=10)
            except KafkaException:
                c.poll(0.5)


def final_read(history: History, args: argparse.Namespace, *topics: str) -> None:
    """Every record of `topics` up to their high watermarks, read_committed, as one `final` op;
    a read that fails (a topic lost) is a `fail` the checker names."""
    history.invoke(FINAL, "final", {"topics": list(topics)})
    c = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"final-{time.time_ns()}",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    records: list[Record] = []
    try:
        parts = [TopicPartition(t, p, 0) for t in topics for p in range(args.partitions)]
        ends: dict[tuple[str, int], int] = {}
        for tp in parts:
            ends[(tp.topic, tp.partition)] = high_watermark(c, tp)
        c.assign([tp for tp in parts if ends[(tp.topic, tp.partition)] > 0])
        left = {k for k, end in ends.items() if end > 0}
        deadline = time.monotonic() + READ_SECONDS
        while left:
            if time.monotonic() > deadline:
                raise KafkaException(f"final read still short of the end of {sorted(left)}")
            for m in c.consume(1000, 1):
                err = m.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(err)
                if err is not None:  # at its end: an EOF's offset is the end
                    left.discard((str(m.topic()), int(m.partition() or 0)))
                    continue
                records.append(record(m))
                t, p, o, _ = records[-1]
                if o + 1 >= ends[(t, p)]:
                    left.discard((t, p))
    except KafkaException as exc:
        history.fail(FINAL, "final", {"error": str(exc)})
        return
    finally:
        c.close()
    history.ok(FINAL, "final", {"isolation": "read_committed", "records": records})


class Member(Protocol):
    """One consuming member of a group workload."""

    def step(self) -> None: ...

    def close(self) -> None: ...


def fed(args: argparse.Namespace, history: History, topic: str, members: Sequence[Member]) -> None:
    """A group workload's run: until its time is up, a Feed writes a value to each partition of `topic`
    and each member takes a step; then the feed is flushed, the members closed, and the topic read."""
    feed = Feed(args, history, topic)
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        feed.send(args.partitions, lambda i: i % args.partitions)
        for member in members:
            member.step()
    feed.flush()
    for member in members:
        member.close()
    final_read(history, args, topic)
