"""Typed producers and consumers: values (and keys) serialized against a schema registered in the
Schema Registry, in Confluent's wire format, so a Kafka client with Confluent's serializers reads
what the native client writes, and the other way round.

    producer = await client.create_producer("payments", schema=AvroSchema(PAYMENT))
    await producer.send({"id": "p-1", "amount": 9.5})
    consumer = await client.subscribe("payments", "ledger", schema=AvroSchema())
    (await consumer.receive()).decoded_value                  # {'id': 'p-1', 'amount': 9.5}

Pulsar's shape (`schema=AvroSchema(...)` / `JsonSchema` / `ProtobufSchema` on `create_producer` and
`subscribe`), with Confluent's serializers' behaviour, followed from confluent-kafka's
`schema_registry/_sync/{avro,json_schema,protobuf}.py` and `common/serde.py`:
- the subject is named by a strategy: `<topic>-value` / `<topic>-key` (TopicNameStrategy) by
  default, or the record's name (RecordNameStrategy: an Avro record's full name, a JSON Schema's
  `title`, a Protobuf message's full name), or `<topic>-<record name>`;
- a producer registers its schema under the subject when it is created (`auto_register`, the
  default, as `auto.register.schemas`; else it looks the schema up and fails if it is not there),
  so an incompatible schema fails `create_producer` with the registry's 409 (IncompatibleSchema);
- Avro: the binary encoding of Apache Avro's own `avro` package, read with the writer's schema
  resolved against the consumer's when it gives one; JSON: the value as compact JSON, validated
  against the schema on both sides (JSONSerializer's and JSONDeserializer's `validate`); Protobuf:
  the message's bytes after its message indexes, the .proto file registered as base64 of its
  FileDescriptorProto with its imports as references (subject: the imported file's name; the
  well-known `google/protobuf/`, `google/type/` and `confluent/` files skipped, `skip.known.types`);
- a consumer reads each record's schema id and asks the registry for it once per id.
"""

from __future__ import annotations

import base64
import io
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import avro.errors
import avro.io
import avro.name
import avro.schema
import jsonschema.exceptions
import jsonschema.validators
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtobufMessage

from gateway.client.errors import SchemaError, SchemaRegistryError
from gateway.client.message import Message
from gateway.errors import CorruptMessage
from gateway.formats import schema_wire

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

    from gateway.client.registry import Registered, RegistryClient

SubjectNameStrategy = Callable[[str, str, "str | None"], str]
"""(topic, "value" or "key", the record's name) -> the subject."""


def topic_name_strategy(topic: str, field: str, record_name: str | None) -> str:
    return f"{topic}-{field}"


def record_name_strategy(topic: str, field: str, record_name: str | None) -> str:
    if not record_name:
        raise ValueError("RecordNameStrategy needs a named record: an Avro record, a JSON Schema with a title, "
                         "or a Protobuf message")
    return record_name


def topic_record_name_strategy(topic: str, field: str, record_name: str | None) -> str:
    return f"{topic}-{record_name_strategy(topic, field, record_name)}"


class Schema(ABC):
    """What values are: the schema, and how a producer finds its subject and id."""

    schema_type: ClassVar[str]

    def __init__(self, record_name: str | None, *, subject_name_strategy: SubjectNameStrategy = topic_name_strategy,
                 auto_register: bool = True, normalize: bool = False) -> None:
        """`record_name`: what the record-name strategies name the subject by."""
        self.record_name = record_name
        self.subject_name_strategy = subject_name_strategy
        self.auto_register = auto_register
        self.normalize = normalize

    @abstractmethod
    async def registration(self, registry: RegistryClient) -> dict[str, Any]:
        """The body registering this schema (its references registered first where it has some)."""

    @abstractmethod
    def encode(self, value: object) -> bytes:
        """The payload after the wire-format header; ValueError (or the format's own error) when
        `value` does not match the schema."""

    @abstractmethod
    async def decode(self, payload: bytes, writer: Registered, registry: RegistryClient) -> Any:
        """A payload written with the registered schema `writer`."""

    def message_indexes(self) -> list[int] | None:
        return None


class AvroSchema(Schema):
    """An Avro schema (JSON text or its parsed dict); values are dicts, as fastavro's and Avro's.
    A consumer may leave it out (`AvroSchema()`) to read with each record's writer schema."""

    schema_type = "AVRO"

    def __init__(self, schema: str | dict[str, Any] | None = None, **options: Any) -> None:
        self.text = json.dumps(schema) if isinstance(schema, dict) else schema
        self.parsed = avro.schema.parse(self.text) if self.text is not None else None
        super().__init__(self.parsed.fullname if isinstance(self.parsed, avro.schema.NamedSchema) else None,
                         **options)
        self._writer = avro.io.DatumWriter(self.parsed) if self.parsed is not None else None
        self._writers: dict[int, avro.schema.Schema] = {}  # by id

    async def registration(self, registry: RegistryClient) -> dict[str, Any]:
        if self.text is None:
            raise ValueError("a producer's AvroSchema needs the schema")
        return {"schemaType": "AVRO", "schema": self.text}

    def encode(self, value: object) -> bytes:
        assert self._writer is not None  # registration refused a schema-less one
        out = io.BytesIO()
        self._writer.write(value, avro.io.BinaryEncoder(out))
        return out.getvalue()

    async def decode(self, payload: bytes, writer: Registered, registry: RegistryClient) -> Any:
        parsed = self._writers.get(writer.schema_id)
        if parsed is None:
            names = avro.name.Names()
            await _avro_references(registry, writer.references, names)
            parsed = self._writers[writer.schema_id] = avro.schema.make_avsc_object(json.loads(writer.schema), names)
        reader = avro.io.DatumReader(parsed, self.parsed or parsed)
        return reader.read(avro.io.BinaryDecoder(io.BytesIO(payload)))


async def _avro_references(registry: RegistryClient, references: tuple[dict[str, Any], ...],
                           names: avro.name.Names) -> None:
    """Named types a writer schema builds on, defined first (as Confluent's AvroDeserializer does)."""
    for ref in references:
        body = await registry.version(ref["subject"], ref["version"])
        await _avro_references(registry, tuple(body.get("references", ())), names)
        avro.schema.make_avsc_object(json.loads(body["schema"]), names)


class JsonSchema(Schema):
    """A JSON Schema (text or dict); values are what `json` reads and writes, validated against it.
    A consumer may leave it out (`JsonSchema()`) to validate against each record's writer schema."""

    schema_type = "JSON"

    def __init__(self, schema: str | dict[str, Any] | None = None, **options: Any) -> None:
        self.schema = json.loads(schema) if isinstance(schema, str) else schema
        self._validator = _validator(self.schema) if self.schema is not None else None
        self._writers: dict[int, Validator | None] = {}  # by id; None: a writer with references, not followed
        title = self.schema.get("title") if isinstance(self.schema, dict) else None
        super().__init__(title if isinstance(title, str) else None, **options)

    async def registration(self, registry: RegistryClient) -> dict[str, Any]:
        if self.schema is None:
            raise ValueError("a producer's JsonSchema needs the schema")
        return {"schemaType": "JSON", "schema": json.dumps(self.schema)}

    def encode(self, value: object) -> bytes:
        assert self._validator is not None  # registration refused a schema-less one
        self._validator.validate(value)
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()

    async def decode(self, payload: bytes, writer: Registered, registry: RegistryClient) -> Any:
        value = json.loads(payload)
        validator = self._validator
        if validator is None:
            if writer.schema_id not in self._writers:
                self._writers[writer.schema_id] = None if writer.references else _validator(json.loads(writer.schema))
            validator = self._writers[writer.schema_id]
        if validator is not None:
            validator.validate(value)
        return value


def _validator(schema: Any) -> Validator:
    """A validator of `schema` (of the draft its `$schema` names), made once: making one per value
    costs milliseconds."""
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


class ProtobufSchema(Schema):
    """The Protobuf message class (protoc's generated one) values are; a producer also takes a dict
    of its fields."""

    schema_type = "PROTOBUF"

    def __init__(self, message_class: type[ProtobufMessage], **options: Any) -> None:
        self.message_class = message_class
        self.descriptor = message_class.DESCRIPTOR
        super().__init__(str(self.descriptor.full_name), **options)

    def message_indexes(self) -> list[int] | None:
        """Where the message is in its file: index at each level of nesting, from the top."""
        out: list[int] = []
        current = self.descriptor
        while current.containing_type is not None:
            out.insert(0, list(current.containing_type.nested_types).index(current))
            current = current.containing_type
        out.insert(0, list(current.file.message_types_by_name).index(current.name))
        return out

    async def registration(self, registry: RegistryClient) -> dict[str, Any]:
        return await self._file(registry, self.descriptor.file)

    async def _file(self, registry: RegistryClient, fd: Any) -> dict[str, Any]:
        """The registration of a FileDescriptor (of protobuf's Python or upb runtime, typed apart)."""
        references = []
        for dep in fd.dependencies:
            if dep.name.startswith(("google/protobuf/", "google/type/", "confluent/")):
                continue
            body = await self._file(registry, dep)
            if self.auto_register:
                await registry.register(dep.name, body, self.normalize)
            found = await registry.lookup(dep.name, body, self.normalize)
            references.append({"name": dep.name, "subject": dep.name, "version": found["version"]})
        return {"schemaType": "PROTOBUF", "schema": base64.standard_b64encode(fd.serialized_pb).decode(),
                "references": references}

    def encode(self, value: object) -> bytes:
        if isinstance(value, dict):
            value = json_format.ParseDict(value, self.message_class())
        if not isinstance(value, self.message_class):
            raise TypeError(f"a {self.descriptor.full_name} message or a dict of its fields, not {type(value).__name__}")
        return value.SerializeToString()

    async def decode(self, payload: bytes, writer: Registered, registry: RegistryClient) -> Any:
        return self.message_class.FromString(payload)


_REFUSED = (ValueError, TypeError, KeyError, avro.errors.AvroException, jsonschema.exceptions.ValidationError,
            json_format.ParseError, DecodeError, CorruptMessage)


class Codec:
    """A schema bound to a topic's value or key: the subject and id a producer writes, the ids a
    consumer reads (whatever their subjects, as Confluent's deserializers read them)."""

    def __init__(self, schema: Schema, registry: RegistryClient, field: str, subject: str = "",
                 schema_id: int | None = None) -> None:
        self.schema = schema
        self.registry = registry
        self.subject = subject
        self.field = field
        self._header = schema_wire.header(schema_id, schema.message_indexes()) if schema_id is not None else b""

    @classmethod
    async def producing(cls, schema: Schema, registry: RegistryClient, topic: str, field: str) -> Codec:
        """Bound to the schema's id under its subject: registered now, or looked up."""
        subject = schema.subject_name_strategy(topic, field, schema.record_name)
        body = await schema.registration(registry)
        if schema.auto_register:
            schema_id = await registry.register(subject, body, schema.normalize)
        else:
            schema_id = int((await registry.lookup(subject, body, schema.normalize))["id"])
        return cls(schema, registry, field, subject, schema_id)

    def encode(self, value: object) -> bytes | None:
        if value is None:  # a tombstone stays one, as Confluent's serializers leave None alone
            return None
        try:
            return self._header + self.schema.encode(value)
        except _REFUSED as exc:
            raise SchemaError(f"the {self.field} does not match the {self.schema.schema_type} schema of subject "
                              f"{self.subject!r}: {exc}") from None

    async def decode(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            schema_id, pos = schema_wire.schema_id_of(data)
            writer = await self.registry.schema(schema_id)
            if writer.schema_type != self.schema.schema_type:
                raise ValueError(f"schema {schema_id} is {writer.schema_type}, not {self.schema.schema_type}")
            if self.schema.schema_type == "PROTOBUF":
                _, pos = schema_wire.message_indexes_of(data, pos)
            return await self.schema.decode(data[pos:], writer, self.registry)
        except _REFUSED as exc:
            raise SchemaError(f"the {self.field} is not a {self.schema.schema_type} value of a registered schema: "
                              f"{exc}") from None
        except SchemaRegistryError as exc:  # kept as the cause: retriable when the registry was not reached
            raise SchemaError(f"the {self.field}'s schema could not be read: {exc}") from exc


@dataclass(frozen=True)
class Typed:
    """A producer's or consumer's schemas: of the value, of the key, or both."""

    value: Codec | None
    key: Codec | None

    @classmethod
    async def bind(cls, registry: RegistryClient | None, topic: str, schema: Schema | None,
                   key_schema: Schema | None, *, producing: bool) -> Typed | None:
        if schema is None and key_schema is None:
            return None
        if registry is None:
            raise ValueError("a schema needs the registry: Client.connect(..., schema_registry_url=...)")

        async def one(s: Schema | None, field: str) -> Codec | None:
            if s is None:
                return None
            return await Codec.producing(s, registry, topic, field) if producing else Codec(s, registry, field)

        return cls(await one(schema, "value"), await one(key_schema, "key"))

    def serialize(self, value: object, key: object) -> tuple[object, object]:
        return (self.value.encode(value) if self.value else value), (self.key.encode(key) if self.key else key)

    async def deserialize(self, msg: Message) -> Message:
        """`msg` with `decoded_value` and `decoded_key`; SchemaError (holding `msg`) when undecodable."""
        try:
            value = await self.value.decode(msg.value) if self.value else None
            key = await self.key.decode(msg.key) if self.key else None
        except SchemaError as exc:
            raise SchemaError(f"{msg.message_id}: {exc}", [msg]) from exc.__cause__
        return replace(msg, decoded_value=value, decoded_key=key)
