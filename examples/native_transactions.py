"""Consume-transform-produce exactly once with the native client's transactions.

    python examples/native_transactions.py --url gateway://127.0.0.1:6650 --seed 30 --batch 10

Reads `--source` on a failover subscription, upper-cases each value and writes it to `--sink`.
Each batch of outputs and the cumulative acknowledgement of its inputs commit in one transaction,
so a crash never loses an input nor writes its output twice. The client holds the transaction key
`--key`: starting a second copy fences this one (its open transaction is aborted, its inputs go to
the newcomer). `--seed N` first writes N inputs to the source; the run ends after `--idle-seconds`
without input.
"""

from __future__ import annotations

import argparse
import asyncio

from gateway.client import Client, Message, Timeout


async def seed(client: Client, topic: str, count: int) -> None:
    async with await client.create_producer(topic) as producer:
        await asyncio.gather(*(producer.send(f"word {i}".encode(), key=f"k{i}") for i in range(count)))


async def run(url: str, source: str, sink: str, key: str, seed_count: int, batch: int, idle: float) -> int:
    async with await Client.connect(url, transaction_key=key) as client:
        if seed_count:
            await seed(client, source, seed_count)
        consumer = await client.subscribe(source, "shouter", mode="failover", initial_position="earliest")
        producer = await client.create_producer(sink)
        done = 0
        while True:
            inputs: list[Message] = []
            try:
                while len(inputs) < batch:
                    inputs.append(await consumer.receive(timeout=idle if not inputs else 0.2))
            except Timeout:
                if not inputs:
                    break
            async with await client.new_transaction(timeout=30) as txn:  # commits, or aborts on error
                for msg in inputs:
                    await producer.send((msg.value or b"").upper(), key=msg.key, txn=txn)
                last = max(inputs, key=lambda m: (m.partition, m.offset))
                for partition in {m.partition for m in inputs}:
                    newest = max((m for m in inputs if m.partition == partition), key=lambda m: m.offset)
                    await consumer.acknowledge_cumulative(newest, txn=txn)
            done += len(inputs)
            print(f"committed {len(inputs)} outputs (last input {last.message_id})")
        await consumer.close()
    print(f"done: transformed {done}")
    return done


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="gateway://127.0.0.1:6650")
    parser.add_argument("--source", default="words")
    parser.add_argument("--sink", default="shouts")
    parser.add_argument("--key", default="shouter-1", help="the transaction key (no '&')")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    args = parser.parse_args()
    asyncio.run(run(args.url, args.source, args.sink, args.key, args.seed, args.batch, args.idle_seconds))
