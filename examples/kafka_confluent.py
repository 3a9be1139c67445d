"""Produce a few keyed records with confluent-kafka (librdkafka), then read them back from the gateway.

    python examples/kafka_confluent.py --bootstrap 127.0.0.1:9092 --topic demo

Plain confluent-kafka: `partitioner=murmur2_random` makes keys land where Java and the Python
clients put them (librdkafka's default hashes differently).
"""

from __future__ import annotations

import argparse
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "compression.type": "lz4", "partitioner": "murmur2_random"})

    def report(err: object, msg: object) -> None:
        if err is not None:
            raise KafkaException(err)
        print(f"produced partition={msg.partition()} offset={msg.offset()}")  # type: ignore[attr-defined]

    for i in range(count):
        producer.produce(topic, value=f"hello {i}".encode(), key=f"user-{i % 3}".encode(), on_delivery=report)
    if producer.flush(30) != 0:
        raise SystemExit("records still unsent after 30 s")

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "example", "enable.auto.commit": False})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in meta.partitions}
        consumer.assign([TopicPartition(topic, p, low) for p, (low, _) in ends.items()])
        remaining = sum(high - low for low, high in ends.values())
        received = 0
        deadline = time.monotonic() + 30
        while received < remaining and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            received += 1
            print(f"consumed partition={msg.partition()} offset={msg.offset()} key={msg.key()!r} value={msg.value()!r}")
        print(f"done: produced {count}, consumed {received}")
    finally:
        consumer.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="demo")
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args()
    main(args.bootstrap, args.topic, args.count)
