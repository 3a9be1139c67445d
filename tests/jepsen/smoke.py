"""The lab's own smoke client: an idempotent acks=all producer (or a plain acks=1 one) for a while,
then a read of the whole topic. It prints one JSON line, what was acknowledged and what was read, for a test to compare.

    python -m tests.jepsen.smoke --bootstrap H:P[,H:P] --seconds N [--topic T] [--acks all|1] [--history FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.jepsen.workloads.common import high_watermark
from tests.kafka_clients import create_topics_retried


def produce(bootstrap: str, topic: str, seconds: float, acks: str) -> list[list[int]]:
    """[value, partition, offset] of each acknowledged record."""
    acked: list[list[int]] = []

    def done(err: object, msg: object) -> None:
        if err is None:
            acked.append([int(msg.value()), msg.partition(), msg.offset()])  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": acks == "all",
                  "message.timeout.ms": 120000, "linger.ms": 5})
    deadline, i = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        p.produce(topic, value=str(i).encode(), key=str(i % 7).encode(), on_delivery=done)
        i += 1
        p.poll(0.01)
    p.flush(180)
    return acked


def read_all(bootstrap: str, topic: str) -> list[list[int]]:
    """[value, partition, offset] of each record in the topic."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"smoke-read-{time.time_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    ends = {p: high_watermark(c, TopicPartition(topic, p)) for p in range(3)}
    c.assign([TopicPartition(topic, p, 0) for p in range(3)])
    seen: list[list[int]] = []
    at = {p: 0 for p in ends}
    while any(at[p] < ends[p] for p in ends):
        m = c.poll(1)
        if m is not None and not m.error():
            seen.append([int(m.value()), m.partition(), m.offset()])
            at[m.partition()] = m.offset() + 1
    c.close()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--topic", default="smoke")
    parser.add_argument("--acks", choices=["all", "1"], default="all", help="all: idempotent too; 1: neither")
    parser.add_argument("--history", type=Path, help="write the JSON here rather than on standard output")
    args = parser.parse_args()
    create_topics_retried(args.bootstrap, args.topic, partitions=3, config={"min.insync.replicas": "2"})
    print("created", file=sys.stderr, flush=True)
    acked = produce(args.bootstrap, args.topic, args.seconds, args.acks)
    try:
        found = json.dumps({"acked": acked, "read": read_all(args.bootstrap, args.topic)})
    except KafkaException as exc:  # the topic itself gone or changed: the checker names it
        found = json.dumps({"acked": acked, "read": [], "read_error": str(exc)})
    if args.history:
        args.history.write_text(found)
    else:
        print(found)


if __name__ == "__main__":
    main()
