"""The Schema Registry service every gateway runs: Confluent's REST semantics over the `_schemas`
topic.

Each request first reads the topic up to its end (`_catch_up`: one bounds call when nothing is
new), so every gateway answers from the same records, and a write is answered once this gateway
has read it back. Ids and versions come from one atomic script (`store.schemas.allocate`) before
the record is written: two gateways registering at once never hand out one id twice, and one
schema gets one id everywhere (its fingerprint is the key), as Confluent's single leader would."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from google.protobuf.descriptor_pb2 import FileDescriptorProto

from gateway.domain.log import LogService
from gateway.domain.schemas import errors, proto, records
from gateway.domain.schemas.compat import Level, incompatibilities
from gateway.domain.schemas.formats import Parsed, Reference, SchemaType, descriptor_of, parse, schema_type
from gateway.domain.schemas.view import Version, View
from gateway.errors import InvalidRequest, TopicExists, TopicNotFound
from gateway.formats.records import build_batch, iter_records
from gateway.store import Store

logger = logging.getLogger(__name__)
MODES = ("READWRITE", "READONLY", "IMPORT")
DEFAULT_LEVEL = Level.BACKWARD
MAX_VERSION = 2**31 - 1


def parse_version(raw: str | int) -> int:
    """A version path segment: 1..2^31-1, or latest (-1 says latest too); 42202 otherwise."""
    if raw == "latest":
        return -1
    try:
        n = int(raw)
    except (TypeError, ValueError):
        raise errors.invalid_version(raw) from None
    if n == -1 or 1 <= n <= MAX_VERSION:
        return n
    raise errors.invalid_version(raw)


def _level(raw: object) -> Level:
    """A level's name, in any case; 42203 for anything else (no level given too)."""
    try:
        return Level(raw.upper()) if isinstance(raw, str) else Level("")
    except ValueError:
        raise errors.invalid_level() from None


class SchemaRegistry:
    def __init__(self, log: LogService, store: Store) -> None:
        self.log = log
        self.alloc = store.schemas
        self.view = View()
        self._offset = 0
        self._reading = asyncio.Lock()
        self._parsed: dict[int, Parsed] = {}  # by schema id: an id always stands for one schema
        self._topic_ready = False

    # -- following the topic ----------------------------------------------------------------

    async def _ensure_topic(self) -> None:
        if self._topic_ready:
            return
        try:
            await self.log.topic(records.TOPIC, create=False)
        except TopicNotFound:
            try:
                await self.log.create_topic(records.TOPIC, 1, {"cleanup.policy": "compact"})
            except TopicExists:
                pass  # another gateway made it first
        self._topic_ready = True

    async def _catch_up(self, until: int = -1) -> None:
        """Apply every record up to the topic's end (at least to `until`)."""
        await self._ensure_topic()
        async with self._reading:
            start, end = await self.log.bounds(records.TOPIC, 0)
            end = max(end, until)
            if self._offset < start:
                self._offset = start  # below the log start nothing is left to read
            while self._offset < end:
                sl = await self.log.read(records.TOPIC, 0, self._offset, 256)
                if not sl.entries:
                    break
                for e in sl.entries:
                    for r in iter_records(e.batch, e.base_offset):
                        if r.offset >= self._offset:
                            decoded = records.decode(r.key, r.value)
                            try:
                                if decoded is not None:
                                    self.view.apply(*decoded)
                            except (KeyError, ValueError, TypeError) as exc:  # written by hand: passed over
                                logger.warning("_schemas offset %d: not a registry record (%s): skipped", r.offset, exc)
                    self._offset = max(self._offset, e.next_offset)

    async def _write(self, items: list[tuple[bytes, bytes | None]]) -> None:
        """Append records in one batch and read them back before answering."""
        await self._ensure_topic()
        batch = build_batch([(k, v, []) for k, v in items])
        (produced,) = await self.log.append([(records.TOPIC, 0, batch)], acks=-1)
        if isinstance(produced.result, Exception):
            raise produced.result
        await self._catch_up(produced.result.base_offset + len(items))

    async def fresh(self) -> View:
        """The view with everything written so far, for a read."""
        await self._catch_up()
        return self.view

    # -- schemas ------------------------------------------------------------------------------

    def _resolve(self, refs: tuple[Reference, ...], seen: tuple[str, ...] = ()) -> list[Parsed]:
        """The referenced schemas, parsed, each after those it references itself; a Protobuf file
        under the name it is imported by (the reference's name), as protoc would find it."""
        out: list[Parsed] = []
        for r in refs:
            versions = self.view.versions(r.subject)
            found = [v for v in versions if v.version == r.version] if r.version != -1 else versions[-1:]
            if not found or r.subject in seen:
                raise errors.invalid_schema(f"Invalid schema: reference {r.name} to subject '{r.subject}' "
                                            f"version {r.version} not found")
            p = self.parsed(found[0], seen + (r.subject,))
            if p.type is SchemaType.PROTOBUF:
                out += [d for d in self._resolve(found[0].references, seen + (r.subject,)) if d not in out]
                fd = FileDescriptorProto()
                fd.CopyFrom(descriptor_of(p))
                fd.name = r.name
                p = replace(p, model=fd)
            out.append(p)
        return out

    def parsed(self, v: Version, seen: tuple[str, ...] = ()) -> Parsed:
        p = self._parsed.get(v.schema_id)
        if p is None:
            deps = self._resolve(v.references, seen)
            p = self._parsed[v.schema_id] = parse(SchemaType(v.schema_type), v.text, deps, v.references)
        return p

    def proto_text(self, v: Version) -> str:
        """A Protobuf version's schema as .proto text."""
        return proto.render(descriptor_of(self.parsed(v)))

    def _request(self, body: dict[str, Any], normalize: bool) -> Parsed:
        text = body.get("schema")
        if not isinstance(text, str):
            raise errors.invalid_schema("Empty schema" if text is None else "The schema must be a string")
        raw = body.get("references") or []
        if not isinstance(raw, list) or not all(isinstance(r, dict) and isinstance(r.get("name"), str)
                                                and isinstance(r.get("subject"), str) for r in raw):
            raise errors.invalid_schema("Invalid schema references: each is an object with a name, a subject "
                                        "and a version")
        refs = tuple(Reference(r["name"], r["subject"], parse_version(r.get("version", -1))) for r in raw)
        refs = tuple(replace(r, version=self.view.versions(r.subject)[-1].version)
                     if r.version == -1 and self.view.versions(r.subject) else r for r in refs)
        return parse(schema_type(body.get("schemaType")), text, self._resolve(refs), refs, normalize=normalize)

    def _live(self, subject: str) -> list[Version]:
        live = self.view.versions(subject)
        if not live:
            raise errors.subject_not_found(subject)
        return live

    def version(self, subject: str, raw: str | int, *, deleted: bool = False) -> Version:
        n = parse_version(raw)
        if not self.view.versions(subject, deleted=True):
            raise errors.subject_not_found(subject)
        if n == -1:
            live = self.view.versions(subject, deleted=deleted)
            if not live:
                raise errors.subject_not_found(subject)
            return live[-1]
        found = self.view.subjects[subject].get(n)
        if found is None or (found.deleted and not deleted):
            raise errors.version_not_found(raw)
        return found

    def schema(self, schema_id: int) -> Version:
        holders = self.view.by_id(schema_id)
        if not holders:
            raise errors.schema_not_found(schema_id)
        return holders[0]

    def level(self, subject: str | None) -> Level:
        raw = self.view.configs.get(subject) if subject is not None else None
        return Level(raw or self.view.configs.get(None) or DEFAULT_LEVEL)

    def mode(self, subject: str | None) -> str:
        raw = self.view.modes.get(subject) if subject is not None else None
        return raw or self.view.modes.get(None) or "READWRITE"

    def _writable(self, subject: str | None) -> str:
        mode = self.mode(subject)
        if mode == "READONLY":
            raise errors.not_permitted(f"Subject {subject} is in read-only mode" if subject else
                                       "The registry is in read-only mode")
        return mode

    async def register(self, subject: str, body: dict[str, Any], *, normalize: bool = False) -> Version:
        """POST /subjects/{s}/versions: the version holding the schema, new or already there."""
        await self._catch_up()
        mode = self._writable(subject)
        wanted = body.get("id")
        if wanted is not None and (not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 0):
            raise errors.unprocessable(f"Invalid schema id {wanted!r}: a whole number from 0")
        if wanted is not None and mode != "IMPORT":
            raise errors.not_permitted(f"Subject {subject} is not in import mode")
        new = self._request(body, normalize)
        live = self.view.versions(subject)
        for v in reversed(live):
            if self.parsed(v).fingerprint == new.fingerprint and wanted in (None, v.schema_id):
                return v
        if mode != "IMPORT":
            found = incompatibilities(self.level(subject), new, [self.parsed(v) for v in live])
            if found:
                raise errors.incompatible(subject, found)
        every = self.view.versions(subject, deleted=True)
        try:
            schema_id, number = await self.alloc.allocate(
                new.fingerprint, subject, self.view.max_id, every[-1].version if every else 0,
                -1 if wanted is None else int(wanted))
        except InvalidRequest:  # the id asked for is another schema's
            raise errors.not_permitted(f"Overwrite new schema with id {wanted} is not permitted.") from None
        if mode == "IMPORT" and body.get("version") is not None:
            number = parse_version(body["version"])
        refs = [r.to_json() for r in new.references]
        await self._write([(records.schema_key(subject, number),
                            records.schema_value(subject, number, schema_id, new.text, new.type.value, refs, False))])
        self._parsed.setdefault(schema_id, new)
        return self.view.subjects[subject][number]

    async def lookup(self, subject: str, body: dict[str, Any], *, normalize: bool = False,
                     deleted: bool = False) -> Version:
        """POST /subjects/{s}: the version of the subject holding the schema; 40403 if none does."""
        await self._catch_up()
        if not self.view.versions(subject, deleted=deleted):
            raise errors.subject_not_found(subject)
        new = self._request(body, normalize)
        for v in reversed(self.view.versions(subject, deleted=deleted)):
            if self.parsed(v).fingerprint == new.fingerprint:
                return v
        raise errors.schema_not_found()

    async def check(self, subject: str, raw: str | None, body: dict[str, Any], *,
                    normalize: bool = False) -> list[str]:
        """POST /compatibility/subjects/{s}/versions[/{v}]: why the schema may not follow the given
        version (every version the subject's level compares with, when none is given)."""
        await self._catch_up()
        new = self._request(body, normalize)
        level = self.level(subject)
        if raw is None:
            olds = self.view.versions(subject)
        elif level.transitive:  # a transitive level judges against every version (as Karapace)
            self.version(subject, raw)
            olds = self.view.versions(subject)
        else:
            olds = [self.version(subject, raw)]
        return incompatibilities(level, new, [self.parsed(v) for v in olds])

    # -- deletes ------------------------------------------------------------------------------

    async def delete_subject(self, subject: str, *, permanent: bool) -> list[int]:
        await self._catch_up()
        self._writable(subject)
        every = self.view.versions(subject, deleted=True)
        if not every:
            raise errors.subject_not_found(subject)
        live = [v for v in every if not v.deleted]
        for v in every:
            if self.view.referenced_by(subject, v.version):
                raise errors.reference_exists(subject, v.version)
        if permanent:
            if live:
                raise errors.subject_not_soft_deleted(subject)
            prints = [self.parsed(v).fingerprint for v in every]
            await self._write([(records.schema_key(subject, v.version), None) for v in every])
            await self.alloc.forget(subject, prints)
            return [v.version for v in every]
        if not live:
            raise errors.subject_soft_deleted(subject)
        await self._write([(records.schema_key(subject, v.version), records.schema_value(
            subject, v.version, v.schema_id, v.text, v.schema_type, [r.to_json() for r in v.references], True))
            for v in live])
        return [v.version for v in live]

    async def delete_version(self, subject: str, raw: str, *, permanent: bool) -> int:
        await self._catch_up()
        self._writable(subject)
        # a numbered version is found soft-deleted or not (40406/40407 say which); latest, the live one
        v = self.version(subject, raw, deleted=permanent or parse_version(raw) != -1)
        if self.view.referenced_by(subject, v.version):
            raise errors.reference_exists(subject, v.version)
        if permanent:
            if not v.deleted:
                raise errors.version_not_soft_deleted(subject, v.version)
            await self._write([(records.schema_key(subject, v.version), None)])
            return v.version
        if v.deleted:
            raise errors.version_soft_deleted(subject, v.version)
        await self._write([(records.schema_key(subject, v.version), records.schema_value(
            subject, v.version, v.schema_id, v.text, v.schema_type, [r.to_json() for r in v.references], True))])
        return v.version

    # -- config and mode ----------------------------------------------------------------------

    async def set_level(self, subject: str | None, raw: object) -> Level:
        await self._catch_up()
        level = _level(raw)
        await self._write([(records.config_key(subject), records.config_value(level.value))])
        return level

    async def delete_level(self, subject: str | None) -> Level:
        """The level that was set; 40401 for a subject with neither versions nor a level."""
        await self._catch_up()
        if subject is not None and subject not in self.view.configs and not self.view.versions(subject, deleted=True):
            raise errors.subject_not_found(subject)
        was = self.level(subject)
        await self._write([(records.config_key(subject), None)])
        return was

    async def set_mode(self, subject: str | None, raw: object, *, force: bool = False) -> str:
        await self._catch_up()
        mode = str(raw).upper()
        if mode not in MODES:
            raise errors.invalid_mode(raw)
        if mode == "IMPORT" and not force:
            held = self.view.versions(subject) if subject is not None else [
                v for s in self.view.subjects for v in self.view.versions(s)]
            if held:
                raise errors.not_permitted("Cannot import since found existing subjects")
        await self._write([(records.mode_key(subject), records.mode_value(mode))])
        return mode

    async def delete_mode(self, subject: str | None) -> str:
        await self._catch_up()
        was = self.mode(subject)
        await self._write([(records.mode_key(subject), None)])
        return was
