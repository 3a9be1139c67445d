"""Produce a few keyed records with aiokafka, then read them back from the gateway.

    python examples/kafka_aiokafka.py --bootstrap 127.0.0.1:9092 --topic demo

The gateway speaks the Kafka protocol, so this is plain aiokafka: nothing gateway-specific.
"""

from __future__ import annotations

import argparse
import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition


async def main(bootstrap: str, topic: str, count: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, compression_type="zstd")
    await producer.start()
    try:
        partition_ids = sorted(await producer.partitions_for(topic))  # also creates the topic if allowed
        sent = []
        for i in range(count):
            md = await producer.send_and_wait(topic, f"hello {i}".encode(), key=f"user-{i % 3}".encode())
            sent.append((md.partition, md.offset))
            print(f"produced partition={md.partition} offset={md.offset}")
    finally:
        await producer.stop()

    # no group: positions start at each partition's earliest offset
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in partition_ids]
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        received = 0
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                for r in records:
                    received += 1
                    print(f"consumed partition={tp.partition} offset={r.offset} key={r.key!r} value={r.value!r}")
        print(f"done: produced {len(sent)}, consumed {received}")
    finally:
        await consumer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="demo")
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(asyncio.wait_for(main(args.bootstrap, args.topic, args.count), 60))
