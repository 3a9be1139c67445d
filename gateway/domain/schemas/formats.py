"""Schemas of the three formats a registry serves, parsed once: the text served, the identity that
decides whether two registrations are the same schema, and the parsed model compatibility reads.

Avro is parsed by Apache Avro's own `avro` package (named types of referenced schemas first, as
Confluent's AvroSchemaProvider resolves references), JSON Schema checked against its meta-schema by
`jsonschema`, Protobuf read into a FileDescriptorProto (`gateway.domain.schemas.proto`)."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import avro.errors
import avro.name
import avro.schema
import jsonschema.exceptions
import jsonschema.validators
from google.protobuf.descriptor_pb2 import FileDescriptorProto

from gateway.domain.schemas import proto
from gateway.domain.schemas.errors import RegistryError, invalid_schema, unprocessable


class SchemaType(StrEnum):
    AVRO = "AVRO"
    JSON = "JSON"
    PROTOBUF = "PROTOBUF"


@dataclass(frozen=True)
class Reference:
    """A schema another one builds on: `name` is how it is imported (an Avro type's full name, a
    .proto file's path), `subject` and `version` where it is registered."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class Parsed:
    type: SchemaType
    text: str  # as stored in _schemas and served
    identity: str  # equal for schemas the registry counts as one (the text, normalised when asked)
    model: Any = field(compare=False)  # avro.schema.Schema, a JSON value, a FileDescriptorProto
    references: tuple[Reference, ...] = ()
    deps: tuple[Parsed, ...] = field(default=(), compare=False)  # the referenced schemas, parsed

    @functools.cached_property
    def fingerprint(self) -> str:
        """What one schema id stands for, whichever gateway registers it."""
        refs = json.dumps([r.to_json() for r in self.references], sort_keys=True)
        return hashlib.sha256(f"{self.type}\0{self.identity}\0{refs}".encode()).hexdigest()


def schema_type(value: object) -> SchemaType:
    """The body's `schemaType` (absent: AVRO), 422 for any other word, as Karapace answers."""
    if value is None:
        return SchemaType.AVRO
    try:
        return SchemaType(str(value))
    except ValueError:
        raise unprocessable(f"Invalid schemaType {value}") from None


def _compact(value: Any, *, sort: bool = False) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=sort)


def parse(kind: SchemaType, text: str, deps: list[Parsed], references: tuple[Reference, ...] = (),
          *, normalize: bool = False) -> Parsed:
    """The schema `text` of type `kind`, whose references resolved to `deps` (the referenced
    schemas, parsed); 42201 with the parser's words when it is not a valid one."""
    try:
        if kind is SchemaType.AVRO:
            return _avro(text, deps, references, normalize)
        if kind is SchemaType.JSON:
            return replace(_json(text, references, normalize), deps=tuple(deps))
        fd = proto.descriptor(text, [descriptor_of(d) for d in deps if d.type is SchemaType.PROTOBUF])
        served = proto.serialized(fd)
        return Parsed(kind, served, proto.identity(fd, normalize), fd, references, tuple(deps))
    except RegistryError:
        raise
    except (ValueError, TypeError, KeyError, avro.errors.AvroException, jsonschema.exceptions.SchemaError) as exc:
        reason = getattr(exc, "message", None) or (exc.args[0] if exc.args else type(exc).__name__)
        raise invalid_schema(f"Invalid {kind.value} schema. Error: {reason}") from None


def _avro(text: str, deps: list[Parsed], references: tuple[Reference, ...], normalize: bool) -> Parsed:
    names = avro.name.Names()
    for d in deps:
        if d.type is SchemaType.AVRO:
            avro.schema.make_avsc_object(json.loads(d.text), names)
    raw = json.loads(text)
    schema = avro.schema.make_avsc_object(raw, names)
    # normalised: Avro's own rendering (full names, no redundant namespaces), else the text as sent;
    # either way one schema is one schema however written ("string" is {"type": "string"}), as
    # Confluent's AvroSchema compares its canonical string
    shown = _compact(schema.to_json()) if normalize and not deps else _compact(raw)
    return Parsed(SchemaType.AVRO, shown, _compact(schema.to_json(), sort=True), schema, references)


def _json(text: str, references: tuple[Reference, ...], normalize: bool) -> Parsed:
    raw = json.loads(text)
    if not isinstance(raw, dict | bool):
        raise ValueError("a JSON Schema is an object or a boolean")
    jsonschema.validators.validator_for(raw).check_schema(raw)
    shown = _compact(raw, sort=normalize)
    return Parsed(SchemaType.JSON, shown, _compact(raw, sort=True), raw, references)


def descriptor_of(p: Parsed) -> FileDescriptorProto:
    assert isinstance(p.model, FileDescriptorProto)
    return p.model


def proto_imports(p: Parsed) -> list[FileDescriptorProto]:
    """The .proto files a Protobuf schema imports, directly or through others, each once and before
    the files that import it: what a descriptor pool needs before the schema's own file."""
    out: dict[str, FileDescriptorProto] = {}

    def walk(d: Parsed) -> None:
        for dep in d.deps:
            if dep.type is SchemaType.PROTOBUF and descriptor_of(dep).name not in out:
                walk(dep)
                out[descriptor_of(dep).name] = descriptor_of(dep)

    walk(p)
    return list(out.values())
