"""Typed native producers and consumers (gateway.client.schema) against a real gateway with its
Schema Registry, read and written by confluent-kafka's own serializers through the Kafka face: the
same record both ways, in Confluent's wire format."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.client import (
    AvroSchema,
    Client,
    IncompatibleSchema,
    JsonSchema,
    ProtobufSchema,
    SchemaError,
    SchemaRegistryError,
)
from gateway.client.schema import Schema, record_name_strategy
from gateway.server.gateway import Gateway
from gateway.store.embedded import free_port
from tests.conftest import kafka_bootstrap, native_url, running_gateway, test_config
from tests.kafka_clients import consume, produce
from tests.test_schema_registry import order_message_class

PAYMENT = {"type": "record", "name": "Payment", "namespace": "shop",
           "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "double"}]}
ORDER_JSON = {"title": "Order", "type": "object", "required": ["id"],
              "properties": {"id": {"type": "integer"}, "item": {"type": "string"}}}

pytestmark = pytest.mark.kafka


@pytest.fixture
async def gw(redis_url: str) -> AsyncIterator[Gateway]:
    async with running_gateway(test_config(redis_url, schema_registry_port=free_port())) as g:
        yield g


def registry_url(gw: Gateway) -> str:
    return f"http://127.0.0.1:{gw.listeners['schema_registry'].port}"


@pytest.fixture
async def client(gw: Gateway) -> AsyncIterator[Client]:
    async with await Client.connect(native_url(gw), schema_registry_url=registry_url(gw)) as c:
        yield c


def values_of(fmt: str) -> list[Any]:
    if fmt == "avro":
        return [{"id": f"p-{i}", "amount": i + 0.5} for i in range(3)]
    if fmt == "json":
        return [{"id": i, "item": f"item-{i}"} for i in range(3)]
    cls = order_message_class()
    out = [cls(id=i, item=f"item-{i}", tags=["a"] * i) for i in range(3)]
    for i, v in enumerate(out):
        v.at.seconds = 1_700_000_000 + i
    return out


def native_schema(fmt: str) -> Schema:
    return {"avro": lambda: AvroSchema(PAYMENT), "json": lambda: JsonSchema(ORDER_JSON),
            "protobuf": lambda: ProtobufSchema(order_message_class())}[fmt]()


def confluent(url: str, fmt: str, topic: str) -> tuple[Any, Any]:
    """confluent-kafka's serializer and deserializer of `fmt` for `topic`'s values, each with a
    registry client of its own (nothing one learnt is cached for the other)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    ctx = SerializationContext(topic, MessageField.VALUE)
    writer, reader = SchemaRegistryClient({"url": url}), SchemaRegistryClient({"url": url})
    if fmt == "avro":
        ser: Any = AvroSerializer(writer, json.dumps(PAYMENT))
        de: Any = AvroDeserializer(reader)
    elif fmt == "json":
        ser, de = JSONSerializer(json.dumps(ORDER_JSON), writer), JSONDeserializer(None, schema_registry_client=reader)
    else:
        ser, de = ProtobufSerializer(order_message_class(), writer), ProtobufDeserializer(order_message_class())
        de._registry = reader
    return (lambda v: ser(v, ctx)), (lambda raw: de(raw, ctx))


@pytest.mark.parametrize("fmt", ["avro", "json", "protobuf"])
async def test_a_typed_native_producer_is_read_by_confluents_deserializer(gw: Gateway, client: Client,
                                                                           fmt: str) -> None:
    topic = f"{fmt}-native-out"
    producer = await client.create_producer(topic, schema=native_schema(fmt))
    values = values_of(fmt)
    for v in values:
        await producer.send(v)
    await producer.flush()
    stored = await consume("confluent", kafka_bootstrap(gw), topic, 0, 0, len(values))
    _, decode = confluent(registry_url(gw), fmt, topic)
    assert await asyncio.to_thread(lambda: [decode(v) for _, _, _, v in stored]) == values
    assert await client.registry.version(f"{topic}-value") == await client.registry.version(f"{topic}-value", 1)


@pytest.mark.parametrize("fmt", ["avro", "json", "protobuf"])
async def test_confluents_serializer_is_read_by_a_typed_native_consumer(gw: Gateway, client: Client,
                                                                        fmt: str) -> None:
    topic = f"{fmt}-kafka-out"
    encode, _ = confluent(registry_url(gw), fmt, topic)
    values = values_of(fmt)
    raws = await asyncio.to_thread(lambda: [encode(v) for v in values])
    await produce("confluent", kafka_bootstrap(gw), topic, [(None, raw) for raw in raws])
    schema = {"avro": AvroSchema(), "json": JsonSchema()}.get(fmt) or native_schema(fmt)  # avro, json: the writer's
    consumer = await client.subscribe(topic, "typed", initial_position="earliest", schema=schema)
    got = [await consumer.receive(timeout=30) for _ in values]
    assert [m.decoded_value for m in got] == values
    assert [m.value for m in got] == raws  # the bytes as stored, beside what they mean
    await consumer.acknowledge_cumulative(got[-1])


async def test_an_avro_reader_schema_resolves_the_writers(gw: Gateway, client: Client) -> None:
    """The consumer's schema is the reader's: a field the writer had not gets its default."""
    producer = await client.create_producer("evolving", schema=AvroSchema(PAYMENT))
    await producer.send({"id": "p-1", "amount": 2.5})
    reader = {**PAYMENT, "fields": [*PAYMENT["fields"], {"name": "currency", "type": "string", "default": "EUR"}]}
    batch = await (await client.subscribe("evolving", "r", initial_position="earliest",
                                          schema=AvroSchema(reader))).batch_receive()
    assert [m.decoded_value for m in batch] == [{"id": "p-1", "amount": 2.5, "currency": "EUR"}]


async def test_keys_and_the_record_name_strategy(gw: Gateway, client: Client) -> None:
    key_schema = AvroSchema({"type": "record", "name": "Customer", "namespace": "shop",
                             "fields": [{"name": "no", "type": "int"}]}, subject_name_strategy=record_name_strategy)
    producer = await client.create_producer("keyed", schema=AvroSchema(PAYMENT), key_schema=key_schema)
    await producer.send({"id": "p-1", "amount": 1.0}, key={"no": 7})
    consumer = await client.subscribe("keyed", "k", initial_position="earliest", schema=AvroSchema(),
                                      key_schema=AvroSchema())
    msg = await consumer.receive(timeout=30)
    assert (msg.decoded_key, msg.decoded_value) == ({"no": 7}, {"id": "p-1", "amount": 1.0})
    assert client.registry is not None
    assert (await client.registry.version("shop.Customer"))["version"] == 1
    assert (await client.registry.version("keyed-value"))["version"] == 1


async def test_a_value_that_does_not_match_is_refused_and_nothing_is_sent(gw: Gateway, client: Client) -> None:
    avro = await client.create_producer("strict", schema=AvroSchema(PAYMENT))
    with pytest.raises(SchemaError, match="does not match the AVRO schema of subject 'strict-value'"):
        await avro.send({"id": 3, "amount": 1.0})
    js = await client.create_producer("strict-json", schema=JsonSchema(ORDER_JSON))
    with pytest.raises(SchemaError, match="'id' is a required property"):
        await js.send({"item": "no id"})
    pb = await client.create_producer("strict-pb", schema=ProtobufSchema(order_message_class()))
    with pytest.raises(SchemaError, match="has no field named \"price\""):
        await pb.send({"id": 1, "price": 3})
    plain = await client.create_producer("strict")
    with pytest.raises(TypeError, match="a value is bytes, str or None"):  # a schema's value, but no schema
        await plain.send({"id": "p-1", "amount": 1.0})
    assert (await avro.send({"id": "p-1", "amount": 1.0})).offset == 0  # the refused ones took no offset


async def test_an_incompatible_schema_is_refused_with_the_registrys_409(gw: Gateway, client: Client) -> None:
    await client.create_producer("ledger", schema=AvroSchema(PAYMENT))
    added = {**PAYMENT, "fields": [*PAYMENT["fields"], {"name": "currency", "type": "string"}]}  # no default
    with pytest.raises(IncompatibleSchema) as refused:
        await client.create_producer("ledger", schema=AvroSchema(added))
    assert (refused.value.status, refused.value.error_code, refused.value.retriable) == (409, 409, False)
    assert "incompatible with an earlier schema for subject \"ledger-value\"" in str(refused.value)
    with pytest.raises(SchemaRegistryError) as unknown:  # not registered, and not to be: the registry's 40403
        await client.create_producer("ledger", schema=AvroSchema({**PAYMENT, "name": "Other"}, auto_register=False))
    assert (unknown.value.status, unknown.value.error_code) == (404, 40403)


async def test_a_record_not_of_a_registered_schema_is_raised_with_the_message(gw: Gateway, client: Client) -> None:
    await produce("confluent", kafka_bootstrap(gw), "mixed", [(None, b"plain text"), (None, b"\x00\x00\x00\x00\x03\x99")])
    consumer = await client.subscribe("mixed", "m", initial_position="earliest", schema=AvroSchema())
    with pytest.raises(SchemaError, match="unknown magic byte 112") as first:
        await consumer.receive(timeout=30)
    with pytest.raises(SchemaError, match="Schema 3 not found") as second:
        await consumer.receive(timeout=30)
    assert not second.value.retriable  # the registry answered: no such schema
    [plain], [unknown] = first.value.messages, second.value.messages
    assert (plain.value, plain.offset, unknown.offset) == (b"plain text", 0, 1)
    await consumer.acknowledge_cumulative(unknown)  # the application decides; nothing was lost meanwhile


async def test_a_schema_without_a_registry_is_a_clear_error(gw: Gateway) -> None:
    async with await Client.connect(native_url(gw)) as plain:
        with pytest.raises(ValueError, match="schema_registry_url"):
            await plain.create_producer("orders", schema=AvroSchema(PAYMENT))


async def test_the_registry_is_reached_with_the_clients_credentials(redis_url: str) -> None:
    from gateway.domain.security import Acl

    cfg = test_config(redis_url, schema_registry_port=free_port(), auth=True)
    async with running_gateway(cfg) as g:
        security = g.services.security  # type: ignore[union-attr]
        await security.set_user("alice", "alice-secret")
        await security.add_acl(Acl("User:alice", "topic", "pay", "all", "prefixed"))
        await security.add_acl(Acl("User:alice", "group", "s", "read"))
        async with await Client.connect(native_url(g), username="alice", password="alice-secret",
                                        schema_registry_url=registry_url(g)) as alice:
            producer = await alice.create_producer("payments", schema=AvroSchema(PAYMENT))
            await producer.send({"id": "p-1", "amount": 1.0})
            consumer = await alice.subscribe("payments", "s", initial_position="earliest", schema=AvroSchema())
            assert (await consumer.receive(timeout=30)).decoded_value == {"id": "p-1", "amount": 1.0}
            with pytest.raises(SchemaRegistryError) as denied:  # her ACL covers pay*, not orders
                await alice.create_producer("orders", schema=AvroSchema(PAYMENT))
            assert (denied.value.status, denied.value.error_code) == (403, 40301)


@pytest.mark.parametrize("indexes", [None, [0], [1], [2, 0, 3], [70, 1]])
def test_the_header_is_confluents_byte_for_byte(indexes: list[int] | None) -> None:
    """Golden bytes from confluent-kafka's own SchemaId, and its reader reads ours back."""
    import io

    from confluent_kafka.schema_registry.common.serde import SchemaId

    from gateway.formats import schema_wire

    theirs = SchemaId("PROTOBUF" if indexes else "AVRO", 123456, message_indexes=indexes).id_to_bytes()
    ours = schema_wire.header(123456, indexes)
    assert ours == theirs
    read = SchemaId("PROTOBUF" if indexes is not None else "AVRO")
    read.from_bytes(io.BytesIO(ours + b"payload"))
    assert schema_wire.schema_id_of(ours) == (read.id, 5)
    if indexes is not None:
        assert schema_wire.message_indexes_of(ours, 5) == (read.message_indexes, len(ours))


def nested_and_imported() -> type:
    """shop/line.proto's Line, nested in Order, which imports shop/money.proto: a reference to register."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    money = descriptor_pb2.FileDescriptorProto(name="shop/money.proto", package="shop", syntax="proto3")
    m = money.message_type.add(name="Money")
    m.field.add(name="cents", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    line = descriptor_pb2.FileDescriptorProto(name="shop/line.proto", package="shop", syntax="proto3",
                                              dependency=["shop/money.proto"])
    line.message_type.add(name="Header")
    order = line.message_type.add(name="Order")
    item = order.nested_type.add(name="Line")
    item.field.add(name="sku", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    item.field.add(name="price", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".shop.Money")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(money)
    pool.Add(line)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order.Line"))


async def test_a_nested_protobuf_message_and_its_imports(gw: Gateway, client: Client) -> None:
    """The message indexes of a nested message and an imported file registered as a reference, as
    confluent-kafka's ProtobufSerializer does: its ProtobufDeserializer reads the record."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    cls = nested_and_imported()
    assert ProtobufSchema(cls).message_indexes() == [1, 0]
    producer = await client.create_producer("lines", schema=ProtobufSchema(cls))
    await producer.send({"sku": "a-1", "price": {"cents": 250}})
    [(_, _, _, raw)] = await consume("confluent", kafka_bootstrap(gw), "lines", 0, 0, 1)
    assert raw[5:8] == b"\x04\x02\x00"  # two indexes (zigzag 2 -> 4), 1 (-> 2), 0
    value = ProtobufDeserializer(cls, {"use.deprecated.format": False})(raw, SerializationContext(
        "lines", MessageField.VALUE))
    assert (value.sku, value.price.cents) == ("a-1", 250)
    assert client.registry is not None
    latest = await client.registry.version("lines-value")
    assert latest["references"] == [{"name": "shop/money.proto", "subject": "shop/money.proto", "version": 1}]


async def test_the_blocking_client_takes_schemas_too(gw: Gateway) -> None:
    """Run from a thread: the gateway serves on this test's event loop."""
    from gateway.client.blocking import Client as BlockingClient

    def round_trip() -> object:
        with BlockingClient.connect(native_url(gw), schema_registry_url=registry_url(gw)) as client:
            consumer = client.subscribe("blocking", "b", initial_position="earliest", schema=JsonSchema())
            client.create_producer("blocking", schema=JsonSchema(ORDER_JSON)).send({"id": 1})
            return consumer.receive(timeout=30).decoded_value

    assert await asyncio.to_thread(round_trip) == {"id": 1}
