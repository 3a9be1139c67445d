"""Event-time windows closed by the broker watermark.

Two sensors send readings with event times and say how far they have got (`send_watermark`); the
consumer sums readings per 10-second window and emits a window once the subscription's watermark
passes its end. A sensor that never sent a watermark is not waited for: its reading for a window
already closed comes marked late.

    python examples/native_watermarks.py --url gateway://127.0.0.1:6650 --topic sensors
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections import defaultdict

from gateway.client import Client

BASE = 1_700_000_000_000  # event times are seconds after this instant (epoch ms)
WINDOW = 10_000


def at(seconds: int) -> int:
    return BASE + seconds * 1000


class Windows:
    """Readings summed per event-time window; a window is emitted once the watermark passes its end."""

    def __init__(self) -> None:
        self.open: dict[int, list[int]] = defaultdict(list)

    def add(self, event_time: int, value: int) -> None:
        self.open[(event_time - BASE) // WINDOW * WINDOW].append(value)

    def close_until(self, watermark: int | None) -> None:
        for start in sorted(self.open):
            if watermark is None or BASE + start + WINDOW > watermark:
                break
            values = self.open.pop(start)
            print(f"window [{start // 1000}s, {(start + WINDOW) // 1000}s): {len(values)} readings, sum {sum(values)}")


async def main(url: str, topic: str) -> None:
    async with await Client.connect(url) as client:
        s1, s2, s3 = [await client.create_producer(topic, f"sensor-{n}-{uuid.uuid4().hex[:6]}") for n in (1, 2, 3)]
        consumer = await client.subscribe(topic, f"windows-{uuid.uuid4().hex[:8]}", initial_position="latest")
        windows = Windows()

        async def take(count: int) -> None:
            for _ in range(count):
                msg = await consumer.receive(timeout=10)
                assert msg.event_time is not None and msg.value is not None
                if msg.late:
                    print(f"late: reading {int(msg.value)} at {(msg.event_time - BASE) // 1000}s")
                else:
                    windows.add(msg.event_time, int(msg.value))
                await consumer.acknowledge(msg)

        for sensor, value, second in ((s1, 1, 1), (s2, 3, 2), (s1, 2, 4), (s2, 4, 9)):
            await sensor.send(str(value), event_time=at(second))
        await s1.send_watermark(at(10))
        await s2.send_watermark(at(10))
        await take(4)
        windows.close_until(consumer.last_watermark)  # the acks moved it past both sensors' markers

        await s2.send("5", event_time=at(11))
        await s3.send("100", event_time=at(3))  # sensor 3 never said how far it got
        await s1.send_watermark(at(20))
        await s2.mark_idle()  # sensor 2 has nothing more to say for now
        await take(2)
        async with asyncio.timeout(10):
            async for watermark in consumer.watermarks():
                windows.close_until(watermark)
                if watermark is not None and watermark >= at(20):
                    print(f"watermark: {(watermark - BASE) // 1000}s")
                    break
        await consumer.unsubscribe()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="gateway://127.0.0.1:6650")
    parser.add_argument("--topic", default="sensors")
    args = parser.parse_args()
    asyncio.run(main(args.url, args.topic))
