"""One gateway's view of the registry: what the `_schemas` records up to an offset say.

Pure: `apply` takes records in log order and nothing else changes it, so every gateway that has
read the same prefix of the topic holds the same view (the log is the only truth)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from gateway.domain.schemas.formats import Reference


@dataclass(frozen=True)
class Version:
    subject: str
    version: int
    schema_id: int
    text: str
    schema_type: str
    references: tuple[Reference, ...]
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        """GET /subjects/{s}/versions/{v}'s body: schemaType and references only when there are any."""
        out: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.schema_id}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.to_json() for r in self.references]
        out["schema"] = self.text
        return out


@dataclass
class View:
    subjects: dict[str, dict[int, Version]] = field(default_factory=dict)
    configs: dict[str | None, str] = field(default_factory=dict)  # None: the global level
    modes: dict[str | None, str] = field(default_factory=dict)
    max_id: int = 0
    holders: dict[int, set[tuple[str, int]]] = field(default_factory=dict)  # id -> (subject, version)s

    def _put(self, subject: str, number: int, v: Version | None) -> None:
        """Set (or with None remove) one subject version, keeping the index by id."""
        versions = self.subjects.setdefault(subject, {})
        old = versions.pop(number, None)
        if old is not None:
            self.holders[old.schema_id].discard((subject, number))
            if not self.holders[old.schema_id]:
                del self.holders[old.schema_id]
        if v is not None:
            versions[number] = v
            self.holders.setdefault(v.schema_id, set()).add((subject, number))
            self.max_id = max(self.max_id, v.schema_id)
        elif not versions:
            del self.subjects[subject]

    def apply(self, key: dict[str, Any], value: dict[str, Any] | None) -> None:
        kind, subject = key.get("keytype"), key.get("subject")
        if kind == "SCHEMA" and isinstance(subject, str):
            if value is None:
                self._put(subject, int(key.get("version", 0)), None)
                return
            refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                         for r in value.get("references") or ())
            v = Version(subject, int(value["version"]), int(value["id"]), str(value["schema"]),
                        str(value.get("schemaType") or "AVRO"), refs, bool(value.get("deleted", False)))
            self._put(subject, v.version, v)
        elif kind == "CONFIG":
            self._setting(self.configs, subject, value, "compatibilityLevel")
        elif kind == "MODE":
            self._setting(self.modes, subject, value, "mode")
        elif kind == "DELETE_SUBJECT" and isinstance(subject, str) and value is not None:
            upto = int(value.get("version", 2**31))  # Confluent's soft delete of a whole subject
            for n, v in list(self.subjects.get(subject, {}).items()):
                if n <= upto:
                    self._put(subject, n, replace(v, deleted=True))

    @staticmethod
    def _setting(where: dict[str | None, str], subject: Any, value: dict[str, Any] | None, name: str) -> None:
        s = subject if isinstance(subject, str) else None
        if value is None or not isinstance(value.get(name), str):
            where.pop(s, None)
        else:
            where[s] = value[name]

    def versions(self, subject: str, *, deleted: bool = False) -> list[Version]:
        return [v for _, v in sorted(self.subjects.get(subject, {}).items()) if deleted or not v.deleted]

    def by_id(self, schema_id: int) -> list[Version]:
        """Every subject version holding the schema (soft-deleted ones too), subjects in name order."""
        return [self.subjects[s][n] for s, n in sorted(self.holders.get(schema_id, ()))]

    def referenced_by(self, subject: str, version: int) -> list[int]:
        return sorted({v.schema_id for s in self.subjects for v in self.versions(s)
                       if any(r.subject == subject and r.version == version for r in v.references)})
