"""Consume-transform-produce exactly once with confluent-kafka transactions against the gateway.

    python examples/kafka_transactions.py --bootstrap 127.0.0.1:9092 --source words --sink shouts --seed 30

Reads `--source` as a member of a consumer group, upper-cases each value and writes it to `--sink`;
each batch of outputs and the consumed offsets commit in one transaction, so a crash or restart
never loses an input nor writes its output twice. `--seed N` first writes N inputs to the source,
so each run of the command above transforms the 30 it wrote, none of an earlier run's again; the
run ends after `--idle-seconds` without input.
"""

from __future__ import annotations

import argparse
import time

from confluent_kafka import Consumer, KafkaException, Producer


def seed(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"word {i}".encode())
    if producer.flush(30) != 0:
        raise SystemExit("inputs still unsent after 30 s")


def run(bootstrap: str, source: str, sink: str, idle_seconds: float) -> int:
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "shouter",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",  # never transform another transaction's aborted output
    })
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "shouter-1"})
    producer.init_transactions(30)  # fences any earlier incarnation and aborts its open transaction
    consumer.subscribe([source])
    done = 0
    idle_since = time.monotonic()
    try:
        while time.monotonic() - idle_since < idle_seconds:
            batch = [m for m in consumer.consume(100, 0.5) if m.error() is None]
            if not batch:
                continue
            idle_since = time.monotonic()
            producer.begin_transaction()
            for m in batch:
                producer.produce(sink, key=m.key(), value=m.value().upper())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            producer.commit_transaction(30)
            done += len(batch)
            print(f"committed {len(batch)} outputs ({done} in all)", flush=True)
    except KafkaException:
        producer.abort_transaction(30)
        raise
    finally:
        consumer.close()
    return done


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--source", default="words")
    parser.add_argument("--sink", default="shouts")
    parser.add_argument("--seed", type=int, default=0, help="write this many inputs first")
    parser.add_argument("--idle-seconds", type=float, default=3.0, help="stop after this long without input")
    args = parser.parse_args()
    if args.seed:
        seed(args.bootstrap, args.source, args.seed)
    print(f"done: transformed {run(args.bootstrap, args.source, args.sink, args.idle_seconds)}")
