"""Consume a topic as a consumer group with confluent-kafka, commit, and resume where the group left off.

    python examples/kafka_consumer_group.py --bootstrap 127.0.0.1:9092 --topic demo --group demo-readers

The gateway is the group coordinator: membership, assignments and committed offsets live in Redis,
so a second run of this script (or a restarted gateway) resumes after the last committed offset.
"""

from __future__ import annotations

import argparse
import time

from confluent_kafka import Consumer, KafkaException, Producer


def consume(bootstrap: str, topic: str, group: str, idle_s: float) -> int:
    """Read until nothing new arrives for `idle_s`, committing after each record; returns the count."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 6000,
    })
    consumer.subscribe([topic])
    received = 0
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle_s or not consumer.assignment():
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            consumer.commit(message=msg, asynchronous=False)
            received += 1
            last = time.monotonic()
            print(f"consumed partition={msg.partition()} offset={msg.offset()} value={msg.value()!r}")
    finally:
        consumer.close()  # leaves the group, so the next member gets the partitions at once
    return received


def main(bootstrap: str, topic: str, group: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for i in range(count):
        producer.produce(topic, value=f"order {i}".encode(), key=f"customer-{i % 4}".encode())
    if producer.flush(30) != 0:
        raise SystemExit("records still unsent after 30 s")
    first = consume(bootstrap, topic, group, idle_s=2.0)
    again = consume(bootstrap, topic, group, idle_s=1.0)
    print(f"done: consumed {first}, then {again} on rejoining")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="demo")
    parser.add_argument("--group", default="demo-readers")
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args()
    main(args.bootstrap, args.topic, args.group, args.count)
