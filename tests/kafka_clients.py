"""Produce and consume with each real Kafka client, one small helper per client, for the tests.

The synchronous clients run in a thread (`asyncio.to_thread`): the gateway under test shares the
test's event loop. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import confluent_kafka as ck
import kafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

TIMEOUT = 20.0
Message = tuple[bytes | None, bytes]  # key, value
Stored = tuple[int, int, bytes | None, bytes]  # partition, offset, key, value

CLIENTS = ("aiokafka", "kafka-python", "confluent")


async def produce(client: str, bs: str, topic: str, messages: list[Message], **options: object) -> list[tuple[int, int]]:
    """(partition, offset) of each message, in order; options are the client's own settings."""
    return await PRODUCERS[client](bs, topic, messages, options)


async def consume(client: str, bs: str, topic: str, partition: int, start: int, count: int,
                  **options: object) -> list[Stored]:
    """`count` records of one partition from offset `start`, by manual assignment (no group)."""
    return await CONSUMERS[client](bs, topic, partition, start, count, options)


async def _aio_produce(bs: str, topic: str, messages: list[Message], options: dict) -> list[tuple[int, int]]:
    producer = AIOKafkaProducer(bootstrap_servers=bs, linger_ms=20, request_timeout_ms=int(TIMEOUT * 1000), **options)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in messages]
        done = [await asyncio.wait_for(f, TIMEOUT) for f in futures]
    finally:
        await producer.stop()
    return [(m.partition, m.offset) for m in done]


async def _aio_consume(bs: str, topic: str, partition: int, start: int, count: int, options: dict) -> list[Stored]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, **options)
    await consumer.start()
    out: list[Stored] = []
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, start)
        deadline = time.monotonic() + TIMEOUT
        while len(out) < count and time.monotonic() < deadline:
            got = await consumer.getmany(tp, timeout_ms=500)
            out += [(r.partition, r.offset, r.key, r.value) for r in got.get(tp, [])]
    finally:
        await consumer.stop()
    return out


def _kp_produce(bs: str, topic: str, messages: list[Message], options: dict) -> list[tuple[int, int]]:
    producer = kafka.KafkaProducer(bootstrap_servers=bs, linger_ms=20, **options)
    try:
        futures = [producer.send(topic, value=value, key=key) for key, value in messages]
        done = [f.get(timeout=TIMEOUT) for f in futures]
    finally:
        producer.close(timeout=TIMEOUT)
    return [(m.partition, m.offset) for m in done]


def _kp_consume(bs: str, topic: str, partition: int, start: int, count: int, options: dict) -> list[Stored]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, **options)
    out: list[Stored] = []
    try:
        tp = kafka.TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, start)
        deadline = time.monotonic() + TIMEOUT
        while len(out) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                out += [(r.partition, r.offset, r.key, r.value) for r in records]
    finally:
        consumer.close()
    return out


def _ck_produce(bs: str, topic: str, messages: list[Message], options: dict) -> list[tuple[int, int]]:
    # murmur2_random is Kafka's (and the other clients') partitioner; librdkafka's default is not
    conf = {"bootstrap.servers": bs, "linger.ms": 20, "partitioner": "murmur2_random", **options}
    producer = ck.Producer(conf)
    results: list[tuple[int, int] | None] = [None] * len(messages)
    errors: list[object] = []

    def delivered(i: int) -> Callable[[object, ck.Message], None]:
        def report(err: object, msg: ck.Message) -> None:
            if err is not None:
                errors.append(err)
            else:
                results[i] = (msg.partition(), msg.offset())

        return report

    for i, (key, value) in enumerate(messages):
        producer.produce(topic, value=value, key=key, on_delivery=delivered(i))
    remaining = producer.flush(TIMEOUT)
    assert remaining == 0 and not errors, (remaining, errors)
    return [r for r in results if r is not None]


def _ck_consume(bs: str, topic: str, partition: int, start: int, count: int, options: dict) -> list[Stored]:
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": "unused-manual-assignment",
                            "enable.auto.commit": False, **options})
    out: list[Stored] = []
    try:
        consumer.assign([ck.TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + TIMEOUT
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def _threaded(fn: Callable[..., object]) -> Callable[..., Awaitable[object]]:
    async def run(*args: object) -> object:
        return await asyncio.to_thread(fn, *args)

    return run


PRODUCERS: dict[str, Callable[..., Awaitable]] = {
    "aiokafka": _aio_produce,
    "kafka-python": _threaded(_kp_produce),
    "confluent": _threaded(_ck_produce),
}
CONSUMERS: dict[str, Callable[..., Awaitable]] = {
    "aiokafka": _aio_consume,
    "kafka-python": _threaded(_kp_consume),
    "confluent": _threaded(_ck_consume),
}

IDEMPOTENT = {
    "aiokafka": {"enable_idempotence": True},
    "kafka-python": {"enable_idempotence": True},
    "confluent": {"enable.idempotence": True},
}


def sasl(client: str, mechanism: str, user: str, password: str, protocol: str = "SASL_PLAINTEXT") -> dict[str, object]:
    """The client's own settings for SASL with a user name and password."""
    if client == "confluent":
        return {"security.protocol": protocol, "sasl.mechanism": mechanism, "sasl.username": user,
                "sasl.password": password}
    return {"security_protocol": protocol, "sasl_mechanism": mechanism, "sasl_plain_username": user,
            "sasl_plain_password": password}


def compression(client: str, codec: str) -> dict[str, object]:
    """The client's own setting for a codec ("none": the Python clients want None)."""
    if client == "confluent":
        return {"compression.type": codec}
    return {"compression_type": None if codec == "none" else codec}


RETRIABLE = {"REQUEST_TIMED_OUT", "KAFKA_STORAGE_ERROR", "NOT_CONTROLLER",  # Kafka's RetriableExceptions here
             "_TRANSPORT",  # librdkafka's broken connection: Java's admin client retries it (NetworkException)
             "_DESTROY_BROKER"}  # the same, its bootstrap broker's handle dropped for the ones Metadata named


def create_topics_retried(bs: str, *topics: str, partitions: int = 1, config: dict[str, str] | None = None,
                          seconds: float = 60.0) -> None:
    """Create `topics` with confluent-kafka's AdminClient, again while a creation is refused
    retriably (a replica too slow for the gateway's wait, a primary cut off from its replicas or
    taken away, a gateway cut off from the client) for `seconds`, as a Kafka client retries a
    RetriableException after its retry.backoff.ms. A topic already there counts as created: an
    earlier try may have reached the replicas after its refusal."""
    import confluent_kafka.admin as cka

    admin = cka.AdminClient({"bootstrap.servers": bs})
    deadline, left = time.monotonic() + seconds, list(topics)
    while left:
        futures = admin.create_topics([cka.NewTopic(t, partitions, 1, config=config or {}) for t in left],
                                      request_timeout=30)
        for topic, future in futures.items():
            try:
                future.result(60)
            except ck.KafkaException as exc:
                err = exc.args[0]
                if err.code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
                    if (err.retriable() or err.name() in RETRIABLE) and time.monotonic() < deadline:
                        continue
                    raise
            left.remove(topic)
        if left:
            time.sleep(0.5)  # the backoff between tries, as a client's retry.backoff.ms


async def create_topic(bs: str, topic: str, partitions: int = 1, **configs: str) -> None:
    """Create a topic with confluent-kafka's AdminClient, failing on any error."""
    import confluent_kafka.admin as cka

    admin = cka.AdminClient({"bootstrap.servers": bs})
    futures = admin.create_topics([cka.NewTopic(topic, partitions, 1, config=configs)], operation_timeout=TIMEOUT)
    await asyncio.to_thread(futures[topic].result, TIMEOUT)


async def topic_config(bs: str, topic: str, name: str) -> str:
    """One config of a topic, as DescribeConfigs (confluent-kafka's AdminClient) gives it."""
    import confluent_kafka.admin as cka

    def run() -> str:
        admin = cka.AdminClient({"bootstrap.servers": bs})  # alive until the answer: its handle serves it
        resource = cka.ConfigResource(cka.ResourceType.TOPIC, topic)
        return str(admin.describe_configs([resource])[resource].result(TIMEOUT)[name].value)

    return await asyncio.to_thread(run)
