"""The native protocol (gateway.client): a producer sends unique values round the partitions, one to
each at a time, every send awaited within a bound (acks=all by default, `--acks 1` for the leader
alone); a send that errs or times out is `info`. An exclusive subscription receives from the start and
acknowledges each message, an acknowledgement recorded `ok` once the gateway says it is durable, so the
checker holds an acknowledged message never to come again (after a reconnection the gateway delivers
only unacknowledged ones) and every delivery to be where the log has it. The final read goes through
the Kafka face: one log, both faces.

    python -m tests.jepsen.workloads.native --native H:P[,H:P] --bootstrap H:P[,H:P] --history FILE
        --seconds N --seed S
"""

from __future__ import annotations

import asyncio
import time

from gateway.client import Client, Consumer, Message, Producer
from gateway.errors import GatewayError
from tests.jepsen.history import History
from tests.jepsen.workloads.common import Record, arguments, create, final_read

PRODUCER, SUBSCRIPTION = "native-producer", "native-subscription"
BOUND = 15.0  # each call's wait; the producer's send timeout is below it
FAILED = (GatewayError, OSError, asyncio.TimeoutError)
SETUP_SECONDS = 60.0  # the client's operation timeout: within it, it retries a retriable refusal of a creation


def _record(m: Message) -> Record:
    return m.topic, m.partition, m.offset, (m.value or b"").decode()


async def _send(history: History, producer: Producer, topic: str, v: str, p: int) -> None:
    history.invoke(PRODUCER, "send", {"v": v, "t": topic, "p": p})
    try:
        mid = await asyncio.wait_for(producer.send(v.encode(), partition=p), BOUND)
    except FAILED as exc:  # it may still have been written
        history.info(PRODUCER, "send", {"v": v, "error": repr(exc)})
    else:
        history.ok(PRODUCER, "send", {"v": v, "t": topic, "p": p, "o": mid.offset})


async def _receive(history: History, consumer: Consumer) -> None:
    """What has arrived, each acknowledged."""
    for _ in range(50):
        try:
            m = await consumer.receive(timeout=0.05)
        except FAILED:
            return
        history.ok(SUBSCRIPTION, "receive", {"records": [_record(m)]})
        try:
            await asyncio.wait_for(consumer.acknowledge(m), BOUND)
        except FAILED as exc:
            history.info(SUBSCRIPTION, "ack", {"records": [_record(m)], "error": repr(exc)})
        else:
            history.ok(SUBSCRIPTION, "ack", {"records": [_record(m)]})


async def run(native: str, topic: str, partitions: int, seconds: float, acks: str, history: History) -> None:
    deadline = time.monotonic() + seconds
    client = await asyncio.wait_for(Client.connect(f"gateway://{native}", operation_timeout=SETUP_SECONDS), BOUND)
    try:
        producer = await client.create_producer(topic, acks=acks, send_timeout=10.0)
        consumer = await client.subscribe(topic, f"{topic}-sub", mode="exclusive", initial_position="earliest")
        i = 0
        while time.monotonic() < deadline:
            await asyncio.gather(*(_send(history, producer, topic, f"{topic}-{i + p}", p) for p in range(partitions)))
            i += partitions
            await _receive(history, consumer)
    finally:
        await asyncio.wait_for(client.close(), BOUND)


def main() -> None:
    args = arguments(__doc__ or "", ("--acks", {"choices": ["1", "all"], "default": "all"}))
    topic = f"native-{args.seed}"
    with History(args.history) as history:
        create(args, topic)
        asyncio.run(run(args.native.split(",")[0], topic, args.partitions, args.seconds, args.acks, history))
        final_read(history, args, topic)


if __name__ == "__main__":
    main()
