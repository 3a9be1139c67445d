"""Produce a few keyed messages with the native client, then consume and acknowledge them.

    python examples/native_produce_consume.py --url gateway://127.0.0.1:6650 --topic demo --count 10
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from gateway.client import Client


async def main(url: str, topic: str, count: int) -> None:
    async with await Client.connect(url) as client:
        # a fresh subscription starting at the end, so only this run's messages come back
        subscription = f"example-{uuid.uuid4().hex[:8]}"
        async with await client.subscribe(topic, subscription, mode="shared") as consumer:
            async with await client.create_producer(topic, linger_ms=2) as producer:
                sends = [
                    producer.send(f"message {i}".encode(), key=f"key-{i % 3}".encode(),
                                  headers={"source": b"example"}, event_time=int(time.time() * 1000))
                    for i in range(count)
                ]
                ids = await asyncio.gather(*sends)
                print(f"produced {len(ids)} messages, last at {ids[-1]}")
            for _ in range(count):
                msg = await consumer.receive(timeout=10)
                print(f"{msg.message_id} key={msg.key!r} value={msg.value!r} event_time={msg.event_time}")
                await consumer.acknowledge(msg)
            await consumer.unsubscribe()  # this run's subscription is not needed again
    print(f"consumed {count} messages")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="gateway://127.0.0.1:6650")
    parser.add_argument("--topic", default="native-example")
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.topic, args.count))
