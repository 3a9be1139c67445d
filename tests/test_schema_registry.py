"""The Schema Registry's REST API as Confluent's registry answers it: routes, bodies, error codes.

The cases are Confluent's API reference's (docs.confluent.io, schema-registry/develop/api) and
Karapace's `tests/integration/test_schema.py` ones that name an error code."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.server.gateway import Gateway
from gateway.store.embedded import free_port
from tests.conftest import running_gateway, test_config

RECORD = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}


def avro(schema: Any) -> dict[str, Any]:
    return {"schema": json.dumps(schema)}


def registry_url(gw: Gateway) -> str:
    return f"http://127.0.0.1:{gw.listeners['schema_registry'].port}"


class Registry:
    """A plain HTTP client of one gateway's registry: (status, body) of each call."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session, self.url = session, url

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(method, self.url + path, json=body) as r:
            text = await r.text()
            try:
                return r.status, json.loads(text)
            except ValueError:
                return r.status, text

    async def get(self, path: str) -> tuple[int, Any]:
        return await self.call("GET", path)

    async def post(self, path: str, body: Any) -> tuple[int, Any]:
        return await self.call("POST", path, body)

    async def put(self, path: str, body: Any) -> tuple[int, Any]:
        return await self.call("PUT", path, body)

    async def delete(self, path: str) -> tuple[int, Any]:
        return await self.call("DELETE", path)


@pytest.fixture
async def registry_gateway(redis_url: str) -> AsyncIterator[Gateway]:
    async with running_gateway(test_config(redis_url, schema_registry_port=free_port())) as gw:
        yield gw


@pytest.fixture
async def sr(registry_gateway: Gateway) -> AsyncIterator[Registry]:
    async with aiohttp.ClientSession() as session:
        yield Registry(session, registry_url(registry_gateway))


async def test_register_and_read_back(sr: Registry) -> None:
    assert await sr.get("/subjects") == (200, [])
    assert await sr.get("/schemas/types") == (200, ["JSON", "PROTOBUF", "AVRO"])
    status, body = await sr.post("/subjects/users-value/versions", avro(RECORD))
    assert status == 200 and set(body) == {"id"}
    schema_id = body["id"]
    assert await sr.post("/subjects/users-value/versions", avro(RECORD)) == (200, {"id": schema_id})
    assert await sr.get("/subjects") == (200, ["users-value"])
    assert await sr.get("/subjects/users-value/versions") == (200, [1])
    text = json.dumps(RECORD, separators=(",", ":"))
    want = {"subject": "users-value", "version": 1, "id": schema_id, "schema": text}
    assert await sr.get("/subjects/users-value/versions/1") == (200, want)
    assert await sr.get("/subjects/users-value/versions/latest") == (200, want)
    assert await sr.get("/subjects/users-value/versions/1/schema") == (200, RECORD)
    assert await sr.get(f"/schemas/ids/{schema_id}") == (200, {"schema": text})
    assert await sr.get(f"/schemas/ids/{schema_id}/versions") == (200, [{"subject": "users-value", "version": 1}])
    assert await sr.get(f"/schemas/ids/{schema_id}/subjects") == (200, ["users-value"])
    assert await sr.post("/subjects/users-value", avro(RECORD)) == (200, want)
    # the same schema under another subject keeps its id
    assert await sr.post("/subjects/other/versions", avro(RECORD)) == (200, {"id": schema_id})


# -- the serializers applications use, through the Kafka face -----------------------------------


@functools.cache
def order_message_class() -> type:
    """A Protobuf message class built at run time (what protoc would generate for test/order.proto)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fd = descriptor_pb2.FileDescriptorProto(name="test/order.proto", package="test", syntax="proto3")
    m = fd.message_type.add(name="Order")
    F = descriptor_pb2.FieldDescriptorProto
    m.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    m.field.add(name="item", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    m.field.add(name="tags", number=3, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("test.Order"))


def round_trip(url: str, fmt: str, values: list[Any]) -> tuple[list[bytes], Any]:
    """Serialize `values` as producers do (registering the schema), then a function that decodes
    bytes as consumers do (fetching the schema by the id in each record)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    ctx = SerializationContext(f"{fmt}-orders", MessageField.VALUE)
    writer = SchemaRegistryClient({"url": url})
    reader = SchemaRegistryClient({"url": url})  # caches nothing the writer learnt
    if fmt == "avro":
        schema = json.dumps({"type": "record", "name": "Order", "fields": [
            {"name": "id", "type": "long"}, {"name": "item", "type": "string"}]})
        ser: Any = AvroSerializer(writer, schema)
        de: Any = AvroDeserializer(reader)
    elif fmt == "json":
        schema = json.dumps({"type": "object", "properties": {"id": {"type": "integer"},
                                                              "item": {"type": "string"}}, "required": ["id"]})
        ser, de = JSONSerializer(schema, writer), JSONDeserializer(None, schema_registry_client=reader)
    else:
        order = order_message_class()
        ser, de = ProtobufSerializer(order, writer), ProtobufDeserializer(order)
        de._registry = reader  # the deserializer of a known message type needs no registry; make it use one
    return [ser(v, ctx) for v in values], lambda raw: de(raw, ctx)


@pytest.mark.kafka
@pytest.mark.parametrize("fmt", ["avro", "json", "protobuf"])
async def test_serializers_round_trip_records_through_the_gateway(registry_gateway: Gateway, sr: Registry,
                                                                  fmt: str) -> None:
    import asyncio

    from tests.conftest import kafka_bootstrap
    from tests.kafka_clients import consume, produce

    if fmt == "protobuf":
        cls = order_message_class()
        values: list[Any] = [cls(id=i, item=f"item-{i}", tags=["a"] * i) for i in range(3)]
    else:
        values = [{"id": i, "item": f"item-{i}"} for i in range(3)]
    raws, decode = await asyncio.to_thread(round_trip, sr.url, fmt, values)
    bs, topic = kafka_bootstrap(registry_gateway), f"{fmt}-orders"
    await produce("confluent", bs, topic, [(None, raw) for raw in raws])
    stored = await consume("confluent", bs, topic, 0, 0, 3)
    decoded = await asyncio.to_thread(lambda: [decode(v) for _, _, _, v in stored])
    assert decoded == values
    status, versions = await sr.get(f"/subjects/{topic}-value/versions")
    assert (status, versions) == (200, [1])
    schema_id = int.from_bytes(raws[0][1:5], "big")  # Confluent's framing: magic 0, then the id
    status, body = await sr.get(f"/schemas/ids/{schema_id}")
    assert status == 200 and body.get("schemaType", "AVRO") == {"avro": "AVRO", "json": "JSON"}.get(fmt, "PROTOBUF")
    if fmt == "protobuf":  # served as .proto text unless asked for the serialized form
        assert body["schema"].startswith('syntax = "proto3";\npackage test;\nmessage Order {\n  int64 id = 1;')
