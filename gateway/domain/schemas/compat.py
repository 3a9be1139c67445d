"""Compatibility levels and the checks behind them.

A level names who must read whom: BACKWARD, the new schema reads data written with the latest
(FORWARD the other way, FULL both); the _TRANSITIVE levels against every live version, not only
the latest (Confluent's docs, "Schema Evolution and Compatibility"). Avro is judged by Apache Avro's
own resolution rules (`avro.compatibility.ReaderWriterCompatibilityChecker`); JSON Schema by
Karapace's rules (`compatibility/jsonschema/checks.py`, and the cases of its
`tests/unit/compatibility/jsonschema/test_jsonschema_compatibility.py`: a type narrowed, a
property added to an open content model or removed from a closed one, a new required property, an
enum, a bound, a pattern or a multipleOf narrowed, uniqueItems added, additional properties closed); Protobuf by Confluent's rules (`proto_compat`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from gateway.domain.schemas import proto_compat
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
        return json_reads(reader.model, writer.model, "#")
    return proto_compat.incompatibilities(descriptor_of(reader), descriptor_of(writer), roles)


_NUMERIC = {"integer", "number"}
_ALL_TYPES = frozenset({"null", "boolean", "object", "array", "number", "string", "integer"})
_UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")


def _types(s: dict[str, Any]) -> frozenset[str]:
    t = s.get("type")
    if t is None:
        return _ALL_TYPES
    return frozenset([t] if isinstance(t, str) else t)


def _open(s: dict[str, Any]) -> bool:
    return s.get("additionalProperties", True) is not False


def json_reads(reader: Any, writer: Any, at: str) -> list[str]:
    """Karapace's JSON Schema rules, for the keywords these checks know (the rest are not compared)."""
    if reader is True or reader == {}:
        return []
    if writer is True or writer == {}:
        return [f"TYPE_NARROWED at {at}: the reader no longer takes anything"] if reader is not True else []
    if reader is False or writer is False:
        return [] if writer is False else [f"TYPE_NARROWED at {at}: the reader takes nothing"]
    found: list[str] = []
    rt, wt = _types(reader), _types(writer)
    missing = {t for t in wt - rt if not (t == "integer" and "number" in rt)}
    if missing:
        found.append(f"TYPE_NARROWED at {at}: {', '.join(sorted(missing))} no longer allowed")
    if "enum" in reader:
        lost = [v for v in writer.get("enum", [None]) if v not in reader["enum"]] if "enum" in writer else ["*"]
        if lost:
            found.append(f"ENUM_ARRAY_NARROWED at {at}")
    for k in _UPPER:
        if k in reader and (k not in writer or reader[k] < writer[k]):
            found.append(f"{k.upper()}_DECREASED at {at}")
    for k in _LOWER:
        if k in reader and (k not in writer or reader[k] > writer[k]):
            found.append(f"{k.upper()}_INCREASED at {at}")
    if "pattern" in reader and reader["pattern"] != writer.get("pattern"):
        found.append(f"PATTERN_CHANGED at {at}")
    if reader.get("uniqueItems") is True and writer.get("uniqueItems") is not True:
        found.append(f"UNIQUE_ITEMS_ADDED at {at}")
    if "multipleOf" in reader:
        m, w = reader["multipleOf"], writer.get("multipleOf")
        if not isinstance(w, int | float) or not isinstance(m, int | float) or m == 0 or (w / m) != int(w / m):
            found.append(f"MULTIPLE_OF_CHANGED at {at}")
    if "object" in rt & wt:
        rp, wp = reader.get("properties", {}), writer.get("properties", {})
        for name, sub in rp.items():
            if name in wp:
                found += json_reads(sub, wp[name], f"{at}/properties/{name}")
            elif _open(writer):  # the writer may have written anything under that name
                found.append(f"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL at {at}/properties/{name}")
        for name in wp:
            if name not in rp and not _open(reader):
                found.append(f"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at {at}/properties/{name}")
        added = set(reader.get("required", [])) - set(writer.get("required", []))
        for name in sorted(added):
            found.append(f"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL at {at}/required/{name}")
        if _open(writer) and not _open(reader):
            found.append(f"ADDITIONAL_PROPERTIES_REMOVED at {at}")
    if "array" in rt & wt and isinstance(reader.get("items"), dict | bool) and isinstance(writer.get("items"),
                                                                                         dict | bool):
        found += json_reads(reader["items"], writer["items"], f"{at}/items")
    return found
