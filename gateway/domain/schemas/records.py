"""The records of the `_schemas` topic, in the Confluent Schema Registry's own key and value JSON
(`SchemaRegistryKey` and friends in Confluent's `storage` package; Karapace reads and writes the
same), so a registry's topic can be copied between this gateway and either of them."""

from __future__ import annotations

import json
from typing import Any

TOPIC = "_schemas"


def _dump(value: dict[str, Any] | None) -> bytes | None:
    return None if value is None else json.dumps(value, separators=(",", ":")).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _dump({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}) or b""


def schema_value(subject: str, version: int, schema_id: int, text: str, schema_type: str,
                 references: list[dict[str, Any]], deleted: bool) -> bytes | None:
    value: dict[str, Any] = {"subject": subject, "version": version, "id": schema_id, "schema": text,
                             "deleted": deleted}
    if schema_type != "AVRO":
        value["schemaType"] = schema_type
    if references:
        value["references"] = references
    return _dump(value)


def config_key(subject: str | None) -> bytes:
    return _dump({"keytype": "CONFIG", "subject": subject, "magic": 0}) or b""


def config_value(level: str | None) -> bytes | None:
    return None if level is None else _dump({"compatibilityLevel": level})


def mode_key(subject: str | None) -> bytes:
    return _dump({"keytype": "MODE", "subject": subject, "magic": 0}) or b""


def mode_value(mode: str | None) -> bytes | None:
    return None if mode is None else _dump({"mode": mode})


def decode(key: bytes | None, value: bytes | None) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """(key, value) of one record; None for a record that is not the registry's (a NOOP, garbage)."""
    try:
        k = json.loads(key or b"")
        v = None if value is None else json.loads(value)
    except ValueError:
        return None
    if not isinstance(k, dict) or not (v is None or isinstance(v, dict)):
        return None
    return k, v
