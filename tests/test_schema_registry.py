"""The Schema Registry's REST API as Confluent's registry answers it: routes, bodies, error codes.

The cases are Confluent's API reference's (docs.confluent.io, schema-registry/develop/api) and
Karapace's `tests/integration/test_schema.py` ones that name an error code."""

from __future__ import annotations

import base64
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
    assert await sr.get("/contexts") == (200, ["."])
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
    assert await sr.get(f"/schemas/ids/{schema_id}?includeSubjects=true&fetchMaxId=true") == (
        200, {"schema": text, "subjects": ["users-value"], "maxId": schema_id})
    assert await sr.get(f"/schemas/ids/{schema_id}/versions") == (200, [{"subject": "users-value", "version": 1}])
    assert await sr.get(f"/schemas/ids/{schema_id}/subjects") == (200, ["users-value"])
    assert await sr.post("/subjects/users-value", avro(RECORD)) == (200, want)
    # however it is written, and with ?normalize=true shown in Avro's own form
    assert await sr.post("/subjects/plain/versions", avro({"type": "string"})) == (200, {"id": schema_id + 1})
    assert await sr.post("/subjects/plain/versions", avro("string")) == (200, {"id": schema_id + 1})
    assert await sr.get("/subjects/plain/versions") == (200, [1])
    status, body = await sr.post("/subjects/named/versions?normalize=true", {"schema": json.dumps(
        {"type": "record", "name": "N", "namespace": "a", "fields": [{"name": "f", "type": {"type": "int"}}]})})
    assert (await sr.get("/subjects/named/versions/1/schema"))[1] == {
        "type": "record", "name": "N", "namespace": "a", "fields": [{"name": "f", "type": "int"}]}
    # the same schema under another subject keeps its id
    assert await sr.post("/subjects/other/versions", avro(RECORD)) == (200, {"id": schema_id})


# -- the serializers applications use, through the Kafka face -----------------------------------


@functools.cache
def order_message_class() -> type:
    """A Protobuf message class built at run time (what protoc would generate for test/order.proto)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    fd = descriptor_pb2.FileDescriptorProto(name="test/order.proto", package="test", syntax="proto3",
                                            dependency=["google/protobuf/timestamp.proto"])
    m = fd.message_type.add(name="Order")
    F = descriptor_pb2.FieldDescriptorProto
    m.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    m.field.add(name="item", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    m.field.add(name="tags", number=3, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    m.field.add(name="at", number=4, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                type_name=".google.protobuf.Timestamp")  # a well-known type: imported, not referenced
    pool = descriptor_pool.DescriptorPool()
    timestamp = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(timestamp)
    pool.Add(timestamp)
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
        for i, v in enumerate(values):
            v.at.seconds = 1_700_000_000 + i
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
        assert body["schema"].startswith('syntax = "proto3";\npackage test;\nimport "google/protobuf/timestamp.proto";'
                                         '\nmessage Order {\n  int64 id = 1;')


# -- error codes ------------------------------------------------------------------------------------


def err(status: int, code: int, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"error_code": code, "message": message}


async def test_reads_of_what_is_not_there(sr: Registry) -> None:
    assert await sr.get("/subjects/nope/versions") == err(404, 40401, "Subject 'nope' not found.")
    assert await sr.get("/subjects/nope/versions/1") == err(404, 40401, "Subject 'nope' not found.")
    assert await sr.post("/subjects/users/versions", avro(RECORD)) == (200, {"id": 1})
    assert await sr.get("/subjects/users/versions/9") == err(404, 40402, "Version 9 not found.")
    for bad in ("0", "abc", "2147483648"):
        assert await sr.get(f"/subjects/users/versions/{bad}") == err(
            422, 42202, f"The specified version '{bad}' is not a valid version id. Allowed values are between "
            '[1, 2^31-1] and the string "latest"')
    assert await sr.get("/schemas/ids/999") == err(404, 40403, "Schema 999 not found")
    assert await sr.post("/subjects/users", avro("string")) == err(404, 40403, "Schema not found")
    assert await sr.post("/subjects/nope", avro(RECORD)) == err(404, 40401, "Subject 'nope' not found.")
    assert await sr.get("/config/users") == err(
        404, 40408, "Subject 'users' does not have subject-level compatibility configured")
    assert await sr.get("/config/users?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD"})
    assert await sr.get("/mode/users") == err(404, 40409, "Subject 'users' does not have subject-level mode configured")
    assert await sr.get("/mode") == (200, {"mode": "READWRITE"})
    assert await sr.get("/no/such/route") == err(404, 404, "HTTP 404 Not Found")
    assert await sr.get("/schemas/ids/abc") == err(404, 404, "HTTP 404 Not Found")


async def test_refusals_of_bad_input_change_nothing(sr: Registry) -> None:
    status, body = await sr.post("/subjects/users/versions", {"schema": '{"type": "recrod"}'})
    assert status == 422 and body["error_code"] == 42201 and body["message"].startswith("Invalid AVRO schema")
    status, body = await sr.post("/subjects/users/versions", {"schema": "{", "schemaType": "JSON"})
    assert status == 422 and body["error_code"] == 42201
    status, body = await sr.post("/subjects/users/versions", {"schema": "message X { Y y = 1; }",
                                                             "schemaType": "PROTOBUF"})
    assert (status, body["error_code"], body["message"]) == (422, 42201, "Invalid PROTOBUF schema. Error: unknown type Y")
    assert await sr.post("/subjects/users/versions", {"schema": "{}", "schemaType": "XML"}) == err(
        422, 422, "Invalid schemaType XML")
    status, body = await sr.call("POST", "/subjects/users/versions", "not an object")
    assert status == 400
    status, body = await sr.post("/subjects/users/versions", {**avro(RECORD), "references": [{"subject": "x"}]})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = await sr.post("/subjects/users/versions", {**avro(RECORD), "references": "x"})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = await sr.post("/subjects/users/versions", {**avro(RECORD), "id": "seven"})
    assert (status, body["error_code"]) == (422, 422)
    assert await sr.put("/config", {"compatibility": "SIDEWAYS"}) == err(
        422, 42203, "Invalid compatibility level. Valid values are none, backward, forward, full, "
        "backward_transitive, forward_transitive, and full_transitive")
    assert (await sr.put("/config", {}))[1]["error_code"] == 42203
    assert (await sr.put("/config/users", {"compatibility": None}))[1]["error_code"] == 42203
    assert await sr.put("/mode", {"mode": "WRITEONLY"}) == err(
        422, 42204, "Invalid mode WRITEONLY. Valid values are READWRITE, READONLY and IMPORT")
    assert await sr.get("/subjects") == (200, [])
    assert await sr.get("/config") == (200, {"compatibilityLevel": "BACKWARD"})


async def test_soft_and_hard_deletes(sr: Registry) -> None:
    v1 = RECORD
    v2 = {**RECORD, "fields": [*RECORD["fields"], {"name": "age", "type": "int", "default": 0}]}
    assert (await sr.post("/subjects/users/versions", avro(v1)))[0] == 200
    assert (await sr.post("/subjects/users/versions", avro(v2)))[0] == 200
    assert await sr.delete("/subjects/users/versions/2?permanent=true") == err(
        404, 40407, "Subject 'users' Version 2 was not deleted first before being permanently deleted")
    assert await sr.delete("/subjects/users/versions/2") == (200, 2)
    assert await sr.delete("/subjects/users/versions/2") == err(
        404, 40406, "Subject 'users' Version 2 was soft deleted.Set permanent=true to delete permanently")
    assert await sr.get("/subjects/users/versions") == (200, [1])
    assert await sr.get("/subjects/users/versions?deleted=true") == (200, [1, 2])
    assert (await sr.get("/subjects/users/versions/2"))[1]["error_code"] == 40402
    assert (await sr.get("/subjects/users/versions/2?deleted=true"))[0] == 200
    assert await sr.delete("/subjects/users?permanent=true") == err(
        404, 40405, "Subject 'users' was not deleted first before being permanently deleted")
    assert await sr.delete("/subjects/users") == (200, [1])
    assert await sr.delete("/subjects/users") == err(
        404, 40404, "Subject 'users' was soft deleted.Set permanent=true to delete permanently")
    assert await sr.get("/subjects") == (200, [])
    assert await sr.get("/subjects?deleted=true") == (200, ["users"])
    assert await sr.delete("/subjects/users?permanent=true") == (200, [1, 2])
    assert await sr.get("/subjects?deleted=true") == (200, [])
    assert (await sr.get("/subjects/users/versions"))[1]["error_code"] == 40401
    # gone for good: the subject starts again at version 1
    assert (await sr.post("/subjects/users/versions", avro(v2)))[0] == 200
    assert await sr.get("/subjects/users/versions") == (200, [1])


async def test_modes(sr: Registry) -> None:
    assert (await sr.post("/subjects/users/versions", avro(RECORD)))[0] == 200
    assert await sr.put("/mode/users", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    assert await sr.post("/subjects/users/versions", avro("string")) == err(
        422, 42205, "Subject users is in read-only mode")
    assert (await sr.post("/subjects/others/versions", avro("string")))[0] == 200  # the global mode
    assert await sr.delete("/mode/users") == (200, {"mode": "READONLY"})
    assert await sr.put("/mode", {"mode": "IMPORT"}) == err(422, 42205, "Cannot import since found existing subjects")
    assert await sr.post("/subjects/users/versions", {**avro("long"), "id": 42}) == err(
        422, 42205, "Subject users is not in import mode")
    assert await sr.put("/mode?force=true", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
    # an import keeps the ids and versions it is given, unchecked
    assert await sr.post("/subjects/imported/versions", {**avro("long"), "id": 42, "version": 7}) == (200, {"id": 42})
    assert (await sr.get("/subjects/imported/versions/7"))[1]["id"] == 42
    assert await sr.post("/subjects/imported/versions", {**avro("float"), "id": 42}) == err(
        422, 42205, "Overwrite new schema with id 42 is not permitted.")
    assert await sr.put("/mode", {"mode": "READWRITE"}) == (200, {"mode": "READWRITE"})
    assert (await sr.post("/subjects/next/versions", avro("double")))[1]["id"] == 43  # after every id in use


async def test_references_and_referencedby(sr: Registry) -> None:
    address = {"type": "record", "name": "Address", "namespace": "shop", "fields": [{"name": "city", "type": "string"}]}
    customer = {"type": "record", "name": "Customer", "namespace": "shop",
                "fields": [{"name": "address", "type": "shop.Address"}]}
    status, body = await sr.post("/subjects/address/versions", avro(address))
    assert status == 200
    address_id = body["id"]
    ref = [{"name": "shop.Address", "subject": "address", "version": 1}]
    status, body = await sr.post("/subjects/customer/versions", {**avro(customer), "references": ref})
    assert status == 200
    customer_id = body["id"]
    assert (await sr.get(f"/schemas/ids/{customer_id}"))[1]["references"] == ref
    assert await sr.get("/subjects/address/versions/1/referencedby") == (200, [customer_id])
    assert await sr.delete("/subjects/address/versions/1") == err(
        422, 42206, "One or more references exist to the schema {magic=1,keytype=SCHEMA,subject=address,version=1}.")
    status, body = await sr.post("/subjects/customer/versions", avro(customer))  # Address unresolved
    assert status == 422 and body["error_code"] == 42201
    assert address_id != customer_id


# -- compatibility --------------------------------------------------------------------------------


def rec(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "R", "fields": list(fields)}


A_INT, A_STR = {"name": "a", "type": "int"}, {"name": "a", "type": "string"}
B, B_DEFAULT = {"name": "b", "type": "string"}, {"name": "b", "type": "string", "default": ""}


def js(schema: dict[str, Any]) -> dict[str, Any]:
    return {"schema": json.dumps(schema), "schemaType": "JSON"}


def obj(props: dict[str, Any], *, required: tuple[str, ...] = (), closed: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props, "required": list(required)}
    if closed:
        out["additionalProperties"] = False
    return js(out)


def pb(*fields: tuple[str, int, str], messages: tuple[str, ...] = ("M",)) -> dict[str, Any]:
    """A proto3 file: message M with (name, number, scalar type) fields, and empty messages besides."""
    import base64

    from google.protobuf import descriptor_pb2

    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="c.proto", package="c", syntax="proto3")
    for name in messages:
        m = fd.message_type.add(name=name)
        if name == "M":
            for fname, number, kind in fields:
                m.field.add(name=fname, number=number, type=getattr(F, f"TYPE_{kind.upper()}"), label=F.LABEL_OPTIONAL)
    return {"schema": base64.b64encode(fd.SerializeToString()).decode(), "schemaType": "PROTOBUF"}


def proto(body: str) -> dict[str, str]:
    """A proto3 schema as .proto text."""
    return {"schema": f'syntax = "proto3";\n{body}\n', "schemaType": "PROTOBUF"}


# (level, schemas registered in order, whether the last is accepted); from Confluent's "Schema
# Evolution and Compatibility" summary table and Avro examples, Confluent's JSON Schema and Protobuf
# diff rules (json-schema-provider's and protobuf-provider's `diff` packages), and Karapace's
# compatibility tests where Confluent's rules agree
# (tests/unit/test_avro_compatibility.py, tests/unit/compatibility/jsonschema/
# test_jsonschema_compatibility.py, tests/unit/protobuf/test_protobuf_compatibility.py)
CASES = {
    "avro backward: a new field without a default": ("BACKWARD", [avro(rec(A_INT)), avro(rec(A_INT, B))], False),
    "avro backward: a new field with a default": ("BACKWARD", [avro(rec(A_INT)), avro(rec(A_INT, B_DEFAULT))], True),
    "avro backward: a field deleted": ("BACKWARD", [avro(rec(A_INT, B)), avro(rec(A_INT))], True),
    "avro backward: int promoted to long": (
        "BACKWARD", [avro(rec(A_INT)), avro(rec({"name": "a", "type": "long"}))], True),
    "avro backward: int changed to string": ("BACKWARD", [avro(rec(A_INT)), avro(rec(A_STR))], False),
    "avro backward: an enum symbol removed": (
        "BACKWARD", [avro({"type": "enum", "name": "E", "symbols": ["X", "Y"]}),
                     avro({"type": "enum", "name": "E", "symbols": ["X"]})], False),
    "avro forward: a field deleted without a default": ("FORWARD", [avro(rec(A_INT, B)), avro(rec(A_INT))], False),
    "avro forward: a new field without a default": ("FORWARD", [avro(rec(A_INT)), avro(rec(A_INT, B))], True),
    "avro full: a new field with a default": ("FULL", [avro(rec(A_INT)), avro(rec(A_INT, B_DEFAULT))], True),
    "avro full: a new field without a default": ("FULL", [avro(rec(A_INT)), avro(rec(A_INT, B))], False),
    "avro none: anything": ("NONE", [avro(rec(A_INT)), avro(rec(A_STR))], True),
    "avro backward: only the latest is compared": (
        "BACKWARD", [avro(rec(A_INT, B_DEFAULT)), avro(rec(B_DEFAULT)),
                     avro(rec(B_DEFAULT, {**A_STR, "default": ""}))], True),
    "avro backward transitive: every version is compared": (
        "BACKWARD_TRANSITIVE", [avro(rec(A_INT, B_DEFAULT)), avro(rec(B_DEFAULT)),
                                avro(rec(B_DEFAULT, {**A_STR, "default": ""}))], False),
    "json backward: integer widened to number": (
        "BACKWARD", [js({"type": "integer"}), js({"type": "number"})], True),
    "json backward: number narrowed to integer": (
        "BACKWARD", [js({"type": "number"}), js({"type": "integer"})], False),
    "json backward: a property added to an open content model": (
        "BACKWARD", [obj({"a": {"type": "string"}}), obj({"a": {"type": "string"}, "b": {"type": "string"}})],
        False),
    "json backward: a property added to a closed content model": (
        "BACKWARD", [obj({"a": {"type": "string"}}, closed=True),
                     obj({"a": {"type": "string"}, "b": {"type": "string"}}, closed=True)], True),
    "json backward: a required property added": (
        "BACKWARD", [obj({"a": {"type": "string"}}, closed=True),
                     obj({"a": {"type": "string"}, "b": {"type": "string"}}, required=("b",), closed=True)], False),
    "json backward: a property removed from an open content model": (
        "BACKWARD", [obj({"a": {"type": "string"}, "b": {"type": "string"}}), obj({"a": {"type": "string"}})],
        True),
    "json backward: maxLength decreased": (
        "BACKWARD", [js({"type": "string", "maxLength": 10}), js({"type": "string", "maxLength": 5})], False),
    "json backward: an enum narrowed": ("BACKWARD", [js({"enum": ["x", "y"]}), js({"enum": ["x"]})], False),
    "json backward: an enum widened": ("BACKWARD", [js({"enum": ["x"]}), js({"enum": ["x", "y"]})], True),
    "json backward: a property taking anything added to an open content model": (
        "BACKWARD", [js({"type": "object"}), js({"type": "object", "properties": {"a": {}}})], True),
    "json backward: a required property with a default added to a closed content model": (
        "BACKWARD", [obj({"a": {"type": "string"}}, closed=True),
                     obj({"a": {"type": "string"}, "b": {"type": "string", "default": ""}}, required=("b",),
                         closed=True)], True),
    "json backward: a branch added to an anyOf": (
        "BACKWARD", [js({"anyOf": [{"type": "string"}]}), js({"anyOf": [{"type": "string"}, {"type": "null"}]})],
        True),
    "json backward: a branch added to an allOf": (
        "BACKWARD", [js({"allOf": [{"type": "string"}]}), js({"allOf": [{"type": "string"}, {"maxLength": 3}]})],
        False),
    "json backward: what a not excludes narrowed": (
        "BACKWARD", [js({"not": {"type": ["string", "null"]}}), js({"not": {"type": "string"}})], True),
    "json backward: a dependency added": (
        "BACKWARD", [js({"type": "object"}), js({"type": "object", "dependencies": {"a": ["b"]}})], False),
    "json backward: a recursive schema's leaf changed": (
        "BACKWARD", [js({"definitions": {"n": {"type": "object", "properties": {"next": {"$ref": "#/definitions/n"},
                                                                                "v": {"type": "integer"}}}},
                         "$ref": "#/definitions/n"}),
                     js({"definitions": {"n": {"type": "object", "properties": {"next": {"$ref": "#/definitions/n"},
                                                                                "v": {"type": "string"}}}},
                         "$ref": "#/definitions/n"})], False),
    "json backward: a $ref followed within the document": (
        "BACKWARD", [js({"definitions": {"n": {"type": "integer"}}, "$ref": "#/definitions/n"}),
                     js({"definitions": {"n": {"type": "string"}}, "$ref": "#/definitions/n"})], False),
    "json backward: the type widened to a list with null": (
        "BACKWARD", [js({"type": "string"}), js({"type": ["string", "null"]})], True),
    "json backward: uniqueItems added": ("BACKWARD", [js({"type": "array"}), js({"type": "array", "uniqueItems": True})],
                                         False),
    "json backward: multipleOf narrowed": (
        "BACKWARD", [js({"type": "number", "multipleOf": 2}), js({"type": "number", "multipleOf": 4})], False),
    "json backward: multipleOf widened": (
        "BACKWARD", [js({"type": "number", "multipleOf": 4}), js({"type": "number", "multipleOf": 2})], True),
    "json backward: a pattern added": ("BACKWARD", [js({"type": "string"}), js({"type": "string", "pattern": "^a"})],
                                       False),
    "protobuf backward: a field added": ("BACKWARD", [pb(("a", 1, "int32")), pb(("a", 1, "int32"), ("b", 2, "string"))],
                                         True),
    "protobuf backward: int32 to int64": ("BACKWARD", [pb(("a", 1, "int32")), pb(("a", 1, "int64"))], True),
    "protobuf backward: int32 to string": ("BACKWARD", [pb(("a", 1, "int32")), pb(("a", 1, "string"))], False),
    "protobuf backward: the package renamed": (
        "BACKWARD", [{"schema": 'syntax = "proto3"; package a1; message T { string s = 1; }', "schemaType": "PROTOBUF"},
                     {"schema": 'syntax = "proto3"; package a2; message T { string s = 1; }', "schemaType": "PROTOBUF"}],
        False),
    "protobuf backward: an int32 become an enum": (
        "BACKWARD", [{"schema": 'syntax = "proto3"; message T { int32 x = 2; }', "schemaType": "PROTOBUF"},
                     {"schema": 'syntax = "proto3"; message T { E x = 2; enum E { A = 0; B = 1; } }',
                      "schemaType": "PROTOBUF"}], True),
    "protobuf backward: a message removed": (
        "BACKWARD", [pb(("a", 1, "int32"), messages=("M", "N")), pb(("a", 1, "int32"))], False),
    "protobuf backward: a string field made repeated": (
        "BACKWARD", [proto("message T { optional string s = 1; }"), proto("message T { repeated string s = 1; }")],
        True),
    "protobuf backward: a number field made repeated": (
        "BACKWARD", [proto("message T { optional int32 n = 1; }"), proto("message T { repeated int32 n = 1; }")],
        False),
    "protobuf backward: a field moved out of its oneof": (
        "BACKWARD", [proto("message T { oneof o { int32 a = 1; string b = 2; } }"),
                     proto("message T { int32 a = 1; oneof o { string b = 2; } }")], True),
    "protobuf backward: two fields moved into a oneof": (
        "BACKWARD", [proto("message T { int32 a = 1; string b = 2; }"),
                     proto("message T { oneof o { int32 a = 1; string b = 2; } }")], False),
    "protobuf backward: a oneof member removed": (
        "BACKWARD", [proto("message T { oneof o { int32 a = 1; string b = 2; } }"),
                     proto("message T { oneof o { int32 a = 1; } }")], False),
    "protobuf backward: a map's values changed kind": (
        "BACKWARD", [proto("message T { map<string, int32> m = 1; }"), proto("message T { map<string, string> m = 1; }")],
        False),
    "protobuf backward: a field pointed at another message": (
        "BACKWARD", [proto("message T { A x = 1; } message A { int32 i = 1; } message B { int32 i = 1; }"),
                     proto("message T { B x = 1; } message A { int32 i = 1; } message B { int32 i = 1; }")], False),
    "protobuf forward: a message added": (
        "FORWARD", [proto("message T { int32 a = 1; }"), proto("message T { int32 a = 1; } message U { int32 b = 1; }")],
        False),
    "protobuf backward: a message added": (
        "BACKWARD", [proto("message T { int32 a = 1; }"), proto("message T { int32 a = 1; } message U { int32 b = 1; }")],
        True),
}


async def test_compatibility_cases(sr: Registry) -> None:
    """Each case in a subject of its own, at its level: the last schema refused with 409 as
    Confluent's registry refuses it, or accepted; the compatibility endpoint says the same."""
    outcomes = {}
    for i, (name, (level, schemas, _)) in enumerate(CASES.items()):
        subject = f"case-{i}"
        assert await sr.put(f"/config/{subject}", {"compatibility": level}) == (200, {"compatibility": level})
        for schema in schemas[:-1]:
            assert (await sr.post(f"/subjects/{subject}/versions", schema))[0] == 200, name
        status, check = await sr.post(f"/compatibility/subjects/{subject}/versions?verbose=true", schemas[-1])
        assert status == 200 and check["is_compatible"] == (check["messages"] == []), (name, check)
        status, body = await sr.post(f"/subjects/{subject}/versions", schemas[-1])
        assert status in (200, 409), (name, body)
        if status == 409:
            assert body["error_code"] == 409 and body["message"].startswith(
                f'Schema being registered is incompatible with an earlier schema for subject "{subject}"'), name
        outcomes[name] = (status == 200, check["is_compatible"])
    assert outcomes == {name: (accepted, accepted) for name, (_, _, accepted) in CASES.items()}


async def test_compatibility_follows_references_into_the_schemas_they_name(sr: Registry) -> None:
    """A schema whose references move to a new version of the schema they name is judged by what
    that version says, as Confluent's registry opens a referenced .proto file or JSON document."""
    await sr.put("/config/home.proto", {"compatibility": "NONE"})
    await sr.put("/config/addr.json", {"compatibility": "NONE"})
    for v, kind in ((1, "int32"), (2, "string")):
        assert (await sr.post("/subjects/home.proto/versions", proto(f"package d;\nmessage Home {{ {kind} id = 1; }}")))[0] == 200
        assert (await sr.post("/subjects/addr.json/versions", js({"type": "object", "properties": {
            "zip": {"type": "integer" if v == 1 else "string"}}})))[0] == 200
    device = proto('import "home.proto";\nmessage Device { d.Home home = 1; }')
    person = js({"type": "object", "properties": {"address": {"$ref": "addr.json"}}})
    for subject, schema, name in (("device-value", device, "home.proto"), ("person-value", person, "addr.json")):
        def at(version: int, schema: dict[str, Any] = schema, name: str = name) -> dict[str, Any]:
            return {**schema, "references": [{"name": name, "subject": name, "version": version}]}

        assert (await sr.post(f"/subjects/{subject}/versions", at(1)))[0] == 200
        status, body = await sr.post(f"/subjects/{subject}/versions", at(2))
        assert (status, body["error_code"]) == (409, 409), (subject, body)
        assert ("FIELD_SCALAR_KIND_CHANGED" if subject == "device-value" else "TYPE_CHANGED") in body["message"]
        assert (await sr.post(f"/subjects/{subject}/versions", at(1)))[0] == 200  # the same schema again


async def test_compatibility_against_one_version(sr: Registry) -> None:
    assert (await sr.post("/subjects/s/versions", avro(rec(A_INT))))[0] == 200
    assert await sr.post("/compatibility/subjects/s/versions/latest", avro(rec(A_INT, B))) == (
        200, {"is_compatible": False})
    assert await sr.post("/compatibility/subjects/s/versions/1", avro(rec(A_INT, B_DEFAULT))) == (
        200, {"is_compatible": True})
    assert (await sr.post("/compatibility/subjects/s/versions/2", avro(rec(A_INT))))[1]["error_code"] == 40402


# -- several gateways, restarts, users ------------------------------------------------------------


async def test_ids_unique_with_two_gateways_registering_at_once(redis_url: str) -> None:
    """Both gateways register the same twenty schemas (each under a subject of its own and all under
    one shared subject) at the same time: one id per schema whichever gateway answers, distinct ids
    for distinct schemas, and in the shared subject one version per schema, none handed out twice."""
    import asyncio

    cfgs = [test_config(redis_url, schema_registry_port=free_port()) for _ in range(2)]
    async with running_gateway(cfgs[0]) as a, running_gateway(cfgs[1]) as b, aiohttp.ClientSession() as session:
        one, two = Registry(session, registry_url(a)), Registry(session, registry_url(b))
        schemas = [avro(rec({"name": f"f{i}", "type": "int"})) for i in range(20)]
        await one.put("/config/shared", {"compatibility": "NONE"})
        calls = [r.post(f"/subjects/{subject}/versions", s) for i, s in enumerate(schemas)
                 for r in (one, two) for subject in (f"own-{i}", "shared")]
        answers = await asyncio.gather(*calls)
        assert {status for status, _ in answers} == {200}
        ids = [body["id"] for _, body in answers]
        by_schema = [set(ids[i * 4:(i + 1) * 4]) for i in range(20)]
        assert all(len(s) == 1 for s in by_schema), by_schema
        assert len({s.pop() for s in by_schema}) == 20
        for r in (one, two):  # both gateways read the same registry
            status, versions = await r.get("/subjects/shared/versions")
            assert (status, versions) == (200, list(range(1, 21)))  # one version per schema
            held = [(await r.get(f"/subjects/shared/versions/{v}"))[1]["id"] for v in versions]
            assert set(held) == set(ids)


async def test_a_restart_keeps_everything(redis_url: str) -> None:
    cfg = test_config(redis_url, schema_registry_port=free_port())
    async with running_gateway(cfg) as gw, aiohttp.ClientSession() as session:
        sr = Registry(session, registry_url(gw))
        assert await sr.post("/subjects/users/versions", avro(RECORD)) == (200, {"id": 1})
        assert await sr.put("/config/users", {"compatibility": "FULL"}) == (200, {"compatibility": "FULL"})
        assert await sr.put("/mode/frozen", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
        assert (await sr.post("/subjects/gone/versions", avro("string")))[0] == 200
        assert await sr.delete("/subjects/gone") == (200, [1])
        before = [await sr.get(p) for p in ("/subjects?deleted=true", "/subjects/users/versions/1", "/schemas/ids/2")]
    cfg = test_config(redis_url, schema_registry_port=free_port())
    async with running_gateway(cfg) as gw, aiohttp.ClientSession() as session:
        sr = Registry(session, registry_url(gw))
        assert [await sr.get(p) for p in ("/subjects?deleted=true", "/subjects/users/versions/1",
                                          "/schemas/ids/2")] == before
        assert await sr.get("/config/users") == (200, {"compatibilityLevel": "FULL"})
        assert await sr.get("/mode/frozen") == (200, {"mode": "READONLY"})
        assert await sr.get("/subjects") == (200, ["users"])
        assert await sr.post("/subjects/next/versions", avro("long")) == (200, {"id": 3})


async def test_users_and_acls(redis_url: str) -> None:
    """HTTP Basic with the gateway's users; a subject is authorised as the topic of its name."""
    from gateway.domain.security import Acl

    cfg = test_config(redis_url, schema_registry_port=free_port(), auth=True, super_users="admin")
    async with running_gateway(cfg) as gw:
        security = gw.services.security  # type: ignore[union-attr]
        for user in ("admin", "alice", "bob"):
            await security.set_user(user, f"{user}-secret")
        await security.add_acl(Acl("User:alice", "topic", "orders-", "write", "prefixed"))
        await security.add_acl(Acl("User:bob", "topic", "orders-value", "read"))
        url = registry_url(gw)

        def as_user(user: str | None, password: str = "") -> aiohttp.ClientSession:
            basic = base64.b64encode(f"{user}:{password or f'{user}-secret'}".encode()).decode()
            return aiohttp.ClientSession(headers={"Authorization": f"Basic {basic}"} if user else None)

        async with as_user(None) as s:
            assert await Registry(s, url).get("/subjects") == err(401, 401, "Unauthorized")
        async with as_user("alice", "wrong") as s:
            assert await Registry(s, url).get("/subjects") == err(401, 401, "Unauthorized")
        async with as_user("alice") as s:
            alice = Registry(s, url)
            assert await alice.post("/subjects/orders-value/versions", avro(RECORD)) == (200, {"id": 1})
            status, body = await alice.post("/subjects/payments-value/versions", avro(RECORD))
            assert (status, body["error_code"]) == (403, 40301)
            assert (await alice.put("/config", {"compatibility": "NONE"}))[0] == 403
        async with as_user("bob") as s:
            bob = Registry(s, url)
            assert await bob.get("/subjects") == (200, ["orders-value"])
            assert (await bob.get("/schemas/ids/1"))[0] == 200
            assert (await bob.post("/subjects/orders-value/versions", avro("string")))[0] == 403
            assert (await bob.delete("/subjects/orders-value"))[0] == 403
        async with as_user("admin") as s:
            admin = Registry(s, url)
            assert (await admin.post("/subjects/payments-value/versions", avro("string")))[0] == 200
            assert await admin.put("/config", {"compatibility": "NONE"}) == (200, {"compatibility": "NONE"})
        async with as_user("bob") as s:  # what bob may not read, he does not see
            bob = Registry(s, url)
            assert await bob.get("/subjects") == (200, ["orders-value"])
            assert (await bob.get("/schemas/ids/2"))[1]["error_code"] == 40403


async def test_proto_text_schemas(sr: Registry) -> None:
    """.proto text as people write it: imports through references, maps, oneofs, optional; served
    back as text, or serialized for confluent-kafka's deserializer; checked like any Protobuf."""
    import base64

    from google.protobuf import descriptor_pb2

    money = 'syntax = "proto3";\npackage shop;\nmessage Money { int64 cents = 1; string currency = 2; }\n'
    order = """syntax = "proto3";
package shop;
import "money.proto";
import "google/protobuf/timestamp.proto";
// an order, as written by hand
message Order {
  int64 id = 1;
  optional string note = 2;
  map<string, int32> counts = 3;
  oneof pay { Money total = 4; string voucher = 5; }
  repeated Line lines = 6;
  google.protobuf.Timestamp at = 7;
  message Line { string sku = 1 [deprecated = true]; Status status = 2; }
  enum Status { NEW = 0; SHIPPED = 1; }
}
"""
    proto = {"schemaType": "PROTOBUF"}
    assert (await sr.post("/subjects/money.proto/versions", {**proto, "schema": money}))[0] == 200
    ref = [{"name": "money.proto", "subject": "money.proto", "version": 1}]
    status, body = await sr.post("/subjects/orders-value/versions", {**proto, "schema": order, "references": ref})
    assert status == 200, body
    status, shown = await sr.get("/subjects/orders-value/versions/1")
    assert shown["schema"].splitlines()[:5] == [
        'syntax = "proto3";', "package shop;", 'import "money.proto";', 'import "google/protobuf/timestamp.proto";',
        "message Order {"]
    status, serialized = await sr.get(f"/schemas/ids/{body['id']}?format=serialized")
    fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized["schema"]))
    assert [f.name for f in fd.message_type[0].field] == ["id", "note", "counts", "total", "voucher", "lines", "at"]
    # the text served back is the same schema: a lookup finds it
    assert (await sr.post("/subjects/orders-value", {**proto, "schema": shown["schema"], "references": ref}))[
        1]["id"] == body["id"]
    changed = order.replace("int64 id = 1;", "string id = 1;")
    status, body = await sr.post("/subjects/orders-value/versions", {**proto, "schema": changed, "references": ref})
    assert status == 409 and ("{errorType:\"FIELD_SCALAR_KIND_CHANGED\", description:\"The kind of a SCALAR field at "
                              "path '#/Order/1' in the new schema does not match its kind in the old schema\"}"
                              ) in body["message"]
    status, body = await sr.post("/subjects/orders-value/versions", {**proto, "schema": order})  # no reference
    assert status == 422 and body["error_code"] == 42201 and "Money" in body["message"]


async def test_tls_as_the_other_listeners(redis_url: str, tmp_path: Any) -> None:
    import asyncio

    import trustme
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca.cert_pem.write_to_path(tmp_path / "ca.pem")
    cert.private_key_pem.write_to_path(tmp_path / "key.pem")
    for i, blob in enumerate(cert.cert_chain_pems):
        blob.write_to_path(tmp_path / "cert.pem", append=i > 0)
    cfg = test_config(redis_url, schema_registry_port=free_port(), tls_cert_file=str(tmp_path / "cert.pem"),
                      tls_key_file=str(tmp_path / "key.pem"))
    async with running_gateway(cfg) as gw:
        url = f"https://127.0.0.1:{gw.listeners['schema_registry'].port}"

        def register() -> tuple[int, str]:
            client = SchemaRegistryClient({"url": url, "ssl.ca.location": str(tmp_path / "ca.pem")})
            schema_id = client.register_schema("secure", Schema(json.dumps(RECORD), "AVRO"))
            return schema_id, SchemaRegistryClient({"url": url, "ssl.ca.location": str(tmp_path / "ca.pem")}
                                                   ).get_schema(schema_id).schema_str

        assert await asyncio.to_thread(register) == (1, json.dumps(RECORD, separators=(",", ":")))


async def test_records_written_by_hand_to_the_topic_are_passed_over(registry_gateway: Gateway, sr: Registry) -> None:
    from gateway.formats.records import build_batch

    assert (await sr.post("/subjects/users/versions", avro(RECORD)))[0] == 200
    assert registry_gateway.services is not None
    junk = [(b"not json", b"{}", []), (b'{"keytype":"SCHEMA","subject":"users","version":2}', b'{"id":"x"}', [])]
    await registry_gateway.services.log.append([("_schemas", 0, build_batch(junk))])
    assert (await sr.post("/subjects/users/versions", avro({**RECORD, "fields": [*RECORD["fields"], B_DEFAULT]})))[0] == 200
    assert await sr.get("/subjects/users/versions") == (200, [1, 2])


def test_a_gateway_killed_and_started_again_keeps_its_schemas(gateway_process: Any) -> None:
    """`gateway serve` on its embedded Redis, killed with SIGKILL: the schemas are in the _schemas
    topic, which the embedded Redis's AOF kept."""
    import urllib.request

    def call(path: str, body: Any = None) -> Any:
        request = urllib.request.Request(f"http://127.0.0.1:{gateway_process.schema_registry_port}{path}",
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.loads(r.read())

    gateway_process.schema_registry_port = free_port()
    gateway_process.start()
    assert "schema registry" in gateway_process.banner
    assert call("/subjects/users/versions", avro(RECORD)) == {"id": 1}
    gateway_process.kill()
    gateway_process.start()
    assert call("/subjects/users/versions/latest")["id"] == 1
    assert call("/subjects/names/versions", avro("string")) == {"id": 2}  # ids go on after those kept
    assert gateway_process.stop() == 0


async def test_the_log_cleaner_compacts_the_topic_and_the_registry_reads_the_same(redis_url: str) -> None:
    """_schemas is compacted like any topic: what the cleaner drops (levels set again, versions
    rewritten as deleted) changes nothing a gateway reading the topic afresh finds."""
    from gateway.domain.compaction import Policy

    paths = ("/subjects?deleted=true", "/subjects/users/versions?deleted=true", "/subjects/users/versions/2",
             "/config/users", "/schemas/ids/1", "/subjects/gone/versions?deleted=true")
    cfg = test_config(redis_url, schema_registry_port=free_port(), cleaner_interval=3600)
    async with running_gateway(cfg) as gw, aiohttp.ClientSession() as session:
        sr = Registry(session, registry_url(gw))
        for level in ("NONE", "FULL", "FORWARD", "BACKWARD"):
            assert (await sr.put("/config/users", {"compatibility": level}))[0] == 200
        for schema in (RECORD, {**RECORD, "fields": [*RECORD["fields"], B_DEFAULT]}):
            assert (await sr.post("/subjects/gone/versions", avro(schema)))[0] == 200
        assert (await sr.post("/subjects/users/versions", avro(RECORD)))[0] == 200
        assert (await sr.post("/subjects/users/versions", avro({**RECORD, "fields": [*RECORD["fields"], B_DEFAULT]})))[
            0] == 200
        assert await sr.delete("/subjects/users/versions/1") == (200, 1)
        assert (await sr.delete("/subjects/gone"))[0] == 200
        assert (await sr.delete("/subjects/gone?permanent=true"))[0] == 200
        before = [await sr.get(p) for p in paths]
        assert gw.services is not None and gw.cleaner is not None
        done = await gw.cleaner.clean("_schemas", 0, Policy.of(await gw.services.log.topic_config("_schemas")))
        assert done is not None and done.records_dropped > 0
    cfg = test_config(redis_url, schema_registry_port=free_port())
    async with running_gateway(cfg) as gw, aiohttp.ClientSession() as session:
        sr = Registry(session, registry_url(gw))
        assert [await sr.get(p) for p in paths] == before


async def test_requests_are_counted_in_the_gateway_metrics(registry_gateway: Gateway, sr: Registry) -> None:
    from tests.test_metrics import moved, samples, scrape

    before = samples(await scrape(registry_gateway))
    assert (await sr.post("/subjects/users/versions", avro(RECORD)))[0] == 200
    assert (await sr.get("/subjects/nope/versions"))[0] == 404
    after = samples(await scrape(registry_gateway))
    face = "schema-registry"
    assert moved(before, after, "gateway_requests_total", face=face, api="POST /subjects/{subject}/versions") == 1
    assert moved(before, after, "gateway_request_errors_total", face=face, api="GET /subjects/{subject}/versions",
                 code="40401") == 1
