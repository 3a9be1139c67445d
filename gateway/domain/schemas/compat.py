"""Compatibility levels and the checks behind them.

A level names who must read whom: BACKWARD, the new schema reads data written with the latest
(FORWARD the other way, FULL both); the _TRANSITIVE levels against every live version, not only
the latest (Confluent's docs, "Schema Evolution and Compatibility"). Avro is judged by Apache Avro's
own resolution rules (`avro.compatibility.ReaderWriterCompatibilityChecker`); JSON Schema and
Protobuf by Confluent's registry's own rules (`json_compat`, `proto_compat`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
from google.protobuf.descriptor_pb2 import FileDescriptorProto

from gateway.domain.schemas import json_compat, proto_compat
from gateway.domain.schemas.formats import Parsed, SchemaType, descriptor_of


class Level(StrEnum):
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"
    NONE = "NONE"

    @property
    def transitive(self) -> bool:
        return self.endswith("_TRANSITIVE")


def incompatibilities(level: Level, new: Parsed, olds: list[Parsed]) -> list[str]:
    """Why `new` may not follow `olds` (oldest first) under `level`; empty when it may."""
    if level is Level.NONE or not olds:
        return []
    against = olds if level.transitive else olds[-1:]
    found: list[str] = []
    for old in reversed(against):
        if old.type is not new.type:
            found.append(f"TYPE_CHANGED: the schema type was {old.type.value}, is {new.type.value}")
            continue
        if level.startswith(("BACKWARD", "FULL")):
            found += reads(new, old, ("new", "old"))
        if level.startswith(("FORWARD", "FULL")):
            found += reads(old, new, ("old", "new"))
    return found


def reads(reader: Parsed, writer: Parsed, roles: tuple[str, str]) -> list[str]:
    """Why data written with `writer` cannot be read with `reader` (`roles`: which is the new schema)."""
    if reader.type is SchemaType.AVRO:
        result = ReaderWriterCompatibilityChecker().get_compatibility(reader.model, writer.model)
        if result.compatibility is SchemaCompatibilityType.compatible:
            return []
        return [f"{t.name}: {m}" for t, m in zip(result.incompatibilities, result.messages, strict=False)]
    if reader.type is SchemaType.JSON:
        return json_compat.incompatibilities(reader.model, writer.model, roles, _documents(reader), _documents(writer))
    return proto_compat.incompatibilities(descriptor_of(reader), descriptor_of(writer), roles, _files(reader),
                                          _files(writer))


def _documents(p: Parsed) -> dict[str, Any]:
    """The JSON schemas a JSON Schema's references name, by the name its `$ref`s use."""
    return {r.name: d.model for r, d in zip(p.references, p.deps, strict=False) if d.type is SchemaType.JSON}


def _files(p: Parsed) -> list[tuple[FileDescriptorProto, str]]:
    """The .proto files a Protobuf schema imports through references (each under its import name),
    with what identifies the registered schema each came from."""
    return [(descriptor_of(d), d.fingerprint) for d in p.deps if d.type is SchemaType.PROTOBUF]
