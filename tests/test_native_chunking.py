"""Chunked messages (Pulsar's chunking): a native producer splits a message over the topic's
max.message.bytes into chunks, the consumer puts them together again and acknowledges them as one;
a Kafka consumer of the topic sees the chunks as they are stored. The consumer's bounds on
incomplete messages (maxPendingChunkedMessage, expireTimeOfIncompleteChunkedMessage) with Pulsar's
choices."""

from __future__ import annotations

import asyncio
import os

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition

from gateway.client import Client, Message, MessageTooLarge, NotAllowed
from gateway.client.chunks import Assembler
from gateway.server.gateway import Gateway
from tests.conftest import kafka_bootstrap

TIMEOUT = 60.0
MB = 1 << 20


def kafka_records(bs: str, topic: str, n: int) -> list[tuple[bytes, dict[str, bytes]]]:
    c = KafkaConsumer({"bootstrap.servers": bs, "group.id": "raw", "enable.auto.commit": False,
                       "fetch.max.bytes": 64 * MB, "max.partition.fetch.bytes": 2 * MB})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[bytes, dict[str, bytes]]] = []
    try:
        while len(out) < n:
            m = c.poll(TIMEOUT)
            assert m is not None and m.error() is None, m and m.error()
            value = m.value()
            assert isinstance(value, bytes)
            out.append((value, {str(k): v for k, v in m.headers() or [] if isinstance(v, bytes)}))
    finally:
        c.close()
    return out


async def test_a_20_mb_message_through_a_1_mb_topic(gateway: Gateway, client: Client) -> None:
    await gateway.services.log.create_topic("big", 1, {"max.message.bytes": str(MB)})
    plain = await client.create_producer("big", batching=False)
    big = os.urandom(20 * MB)
    with pytest.raises(MessageTooLarge):
        await plain.send(big)
    # a queue of 4 messages, fewer than the chunks: they leave it room as they are held
    consumer = await client.subscribe("big", "whole", initial_position="earliest", receiver_queue_size=4)
    producer = await client.create_producer("big", chunking_enabled=True)
    sent = await producer.send(big, key=b"k", headers={"kind": b"blob"})
    await producer.send(b"small")
    msg = await consumer.receive(TIMEOUT)
    await consumer.acknowledge(msg)
    small = await consumer.receive(TIMEOUT)
    await consumer.acknowledge(small)
    assert (msg.value == big, msg.key, msg.headers) == (True, b"k", {"kind": b"blob"})
    assert msg.message_id == sent and len(msg.chunk_offsets) == 21 and msg.chunk_offsets == sent.chunks
    assert small.value == b"small"
    with pytest.raises(NotAllowed, match="chunked"):
        await consumer.reconsume_later(msg)
    await consumer.close()
    again = await client.subscribe("big", "whole")  # acknowledged as one: no chunk comes again
    await producer.send(b"next")
    assert (await again.receive(TIMEOUT)).value == b"next"
    # a Kafka consumer of the topic sees the chunks as stored: 21 records, each a slice with its headers
    raw = await asyncio.to_thread(kafka_records, kafka_bootstrap(gateway), "big", 22)
    chunks = raw[:21]
    assert b"".join(v for v, _ in chunks) == big and raw[21][0] == b"small"
    assert [h["x-chunk-id"] for _, h in chunks] == [str(i).encode() for i in range(21)]
    assert {(h["x-num-chunks"], h["x-total-chunk-size"], h["kind"]) for _, h in chunks} == {
        (b"21", str(20 * MB).encode(), b"blob")}
    assert len({h["x-chunk-uuid"] for _, h in chunks}) == 1


def chunk(topic: str, offset: int, ident: bytes, i: int, n: int, value: bytes) -> Message:
    headers = {"x-chunk-uuid": ident, "x-chunk-id": str(i).encode(), "x-num-chunks": str(n).encode(),
               "x-total-chunk-size": b"0"}
    return Message(value, None, headers, topic, 0, offset, 0)


async def test_interleaved_chunks_and_the_bound_on_incomplete_messages() -> None:
    """Chunks of two messages interleave and both come out whole; past max_pending the oldest
    incomplete one is given up (negatively acknowledged unless auto_ack_oldest)."""
    given_up: list[tuple[tuple[int, ...], bool]] = []
    a = Assembler(2, False, 0, lambda m, ack: given_up.append((m.chunk_offsets, ack)))
    assert a.add(chunk("t", 0, b"A", 0, 2, b"a0")) is None
    assert a.add(chunk("t", 1, b"B", 0, 2, b"b0")) is None
    b = a.add(chunk("t", 2, b"B", 1, 2, b"b1"))
    assert a.add(chunk("t", 3, b"C", 0, 2, b"c0")) is None
    assert a.add(chunk("t", 4, b"D", 0, 2, b"d0")) is None  # a third incomplete: A goes
    whole = a.add(chunk("t", 5, b"C", 1, 2, b"c1"))
    assert b is not None and (b.value, b.chunk_offsets, b.headers) == (b"b0b1", (1, 2), {})
    assert whole is not None and (whole.value, whole.offset, whole.message_id.chunks) == (b"c0c1", 5, (3, 5))
    assert given_up == [((0,), False)]


async def test_an_incomplete_chunked_message_expires_acknowledged() -> None:
    dropped: asyncio.Future[tuple[tuple[int, ...], bool]] = asyncio.get_running_loop().create_future()
    a = Assembler(10, False, 0.05, lambda m, ack: dropped.set_result((m.chunk_offsets, ack)))
    assert a.add(chunk("t", 7, b"A", 0, 3, b"a0")) is None
    assert a.add(chunk("t", 8, b"A", 1, 3, b"a1")) is None
    assert await asyncio.wait_for(dropped, TIMEOUT) == ((7, 8), True)
