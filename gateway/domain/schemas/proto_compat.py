"""Protobuf compatibility by Confluent's Schema Registry's rules, the registry whose serializers most
applications run: its `protobuf/diff` package (SchemaDiff, MessageSchemaDiff, FieldSchemaDiff) lists
every difference between the schema data was written with (the original) and the one reading it
(the update), and a change is incompatible when its kind is not one of `SchemaDiff.COMPATIBLE_CHANGES`.

What that means in practice, and where it parts from Karapace's rules (which these checks
followed before):
- a package renamed is incompatible (Karapace: compatible), as is a message removed;
- a field's kind changed between scalar, message and map, or between scalar groups that do not read
  each other's wire values (int32/int64/uint32/uint64/bool/enum; sint32/sint64; string/bytes;
  fixed32/sfixed32; fixed64/sfixed64; float; double), is incompatible;
- a label changed (optional, repeated, required) is incompatible for numbers only: a string or
  bytes field may become repeated (Karapace: incompatible), and a message field's label is not
  compared; a proto3 field without a label has none, so it may gain `repeated`;
- a message-typed field pointing at a type of another (package-less) name is incompatible;
- fields added, removed or renamed, enums and their constants, oneofs added or removed, and a field
  moved out of its oneof are compatible; a required field added or removed, a oneof member removed
  while its oneof stays, or fields that were independent moved into one oneof, are not.
A message type imported from another registered schema is opened and compared as the registry does,
unless both sides import it from the same schema."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from google.protobuf.descriptor_pb2 import DescriptorProto, FieldDescriptorProto, FileDescriptorProto

F = FieldDescriptorProto


class _Kind(Enum):
    SCALAR = 1
    MESSAGE = 2
    MAP = 3


# FieldSchemaDiff.scalarKind: the groups whose members read each other's wire values
_SCALAR_KIND = {
    **dict.fromkeys([F.TYPE_INT32, F.TYPE_INT64, F.TYPE_UINT32, F.TYPE_UINT64, F.TYPE_BOOL, F.TYPE_ENUM], "number"),
    **dict.fromkeys([F.TYPE_SINT32, F.TYPE_SINT64], "signed"),
    **dict.fromkeys([F.TYPE_STRING, F.TYPE_BYTES], "string"),
    **dict.fromkeys([F.TYPE_FIXED32, F.TYPE_SFIXED32], "fixed32"),
    **dict.fromkeys([F.TYPE_FIXED64, F.TYPE_SFIXED64], "fixed64"),
    F.TYPE_FLOAT: "float", F.TYPE_DOUBLE: "double",
}


@dataclass
class _Side:
    """One schema's file, and every message it can name (its own and its imports') by fully
    qualified name, with the package it is declared in and the registered schema it came from."""

    fd: FileDescriptorProto
    imports: list[tuple[FileDescriptorProto, str]]
    messages: dict[str, tuple[DescriptorProto, str, str | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        def walk(prefix: str, ms: list[DescriptorProto], package: str, origin: str | None) -> None:
            for m in ms:
                self.messages.setdefault(f"{prefix}.{m.name}", (m, package, origin))
                walk(f"{prefix}.{m.name}", list(m.nested_type), package, origin)

        for fd, origin in [(self.fd, None), *self.imports]:
            walk(f".{fd.package}" if fd.package else "", list(fd.message_type), fd.package, origin)

    def label(self, f: FieldDescriptorProto) -> str | None:
        """The label as Confluent's ProtobufSchema reads it from a descriptor: none for a proto3
        field without `optional` (nor for proto3 `required`, which proto3 does not have)."""
        if f.proto3_optional:
            return "optional"
        if f.label == F.LABEL_REPEATED:
            return "repeated"
        if self.fd.syntax == "proto3":
            return None
        return "required" if f.label == F.LABEL_REQUIRED else "optional"

    def map_entry(self, f: FieldDescriptorProto) -> DescriptorProto | None:
        if f.type != F.TYPE_MESSAGE or f.label != F.LABEL_REPEATED:
            return None
        found = self.messages.get(f.type_name)
        return found[0] if found is not None and found[0].options.map_entry else None

    def local(self, type_name: str) -> str:
        """A type's name without the package it is declared in (FieldSchemaDiff.compareMessageTypes)."""
        found = self.messages.get(type_name)
        package = found[1] if found is not None else self.fd.package
        prefix = f".{package}." if package else "."
        return type_name[len(prefix):] if type_name.startswith(prefix) else type_name.lstrip(".")


# What each incompatible kind means, `{r}` the reader's schema and `{w}` the writer's (Confluent's
# errorType names, in the `{errorType:"...", description:"..."}` shape its registry answers with)
_WHY = {
    "PACKAGE_CHANGED": "The package at '{p}' in the {r} schema does not match the package in the {w} schema",
    "MESSAGE_REMOVED": "The {r} schema is missing a MESSAGE type at path '{p}' in the {w} schema",
    "FIELD_KIND_CHANGED": "The type of a field at path '{p}' in the {r} schema does not match the {w} schema",
    "FIELD_SCALAR_KIND_CHANGED": "The kind of a SCALAR field at path '{p}' in the {r} schema does not match "
                                 "its kind in the {w} schema",
    "FIELD_NAMED_TYPE_CHANGED": "The type of a MESSAGE field at path '{p}' in the {r} schema does not match "
                                "its type in the {w} schema",
    "FIELD_NUMERIC_LABEL_CHANGED": "The label for a NUMERIC field at path '{p}' in the {r} schema does not "
                                   "match its label in the {w} schema",
    "REQUIRED_FIELD_ADDED": "A required field at path '{p}' in the {r} schema is missing in the {w} schema",
    "REQUIRED_FIELD_REMOVED": "The {r} schema is missing a required field at path '{p}' in the {w} schema",
    "ONEOF_FIELD_REMOVED": "The {r} schema is missing a oneof field at path '{p}' in the {w} schema",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF": "Multiple fields in the oneof at path '{p}' in the {r} schema are outside "
                                      "a oneof in the {w} schema",
    "FIELD_MOVED_TO_EXISTING_ONEOF": "A field in the oneof at path '{p}' in the {r} schema is outside an "
                                     "existing oneof in the {w} schema",
}


class _Diff:
    def __init__(self, old: _Side, new: _Side, roles: tuple[str, str], entered: set[tuple[int, int]]) -> None:
        self.old, self.new = old, new
        self.roles = roles
        self.found: list[str] = []
        self.entered = entered  # message pairs already compared: a recursive type is compared once

    def add(self, kind: str, path: str) -> None:
        reader, writer = self.roles
        why = _WHY[kind].format(p=path, r=reader, w=writer)
        self.found.append(f'{{errorType:"{kind}", description:"{why}"}}')

    def types(self, olds: list[DescriptorProto], news: list[DescriptorProto], path: str) -> None:
        """SchemaDiff.compareTypeElements for messages (enum changes are all compatible)."""
        by_name = {m.name: m for m in news if not m.options.map_entry}
        for old in olds:
            if old.options.map_entry:
                continue
            new = by_name.get(old.name)
            if new is None:
                self.add("MESSAGE_REMOVED", f"{path}/{old.name}")
            else:
                self.message(old, new, f"{path}/{old.name}")

    def message(self, old: DescriptorProto, new: DescriptorProto, path: str) -> None:
        """MessageSchemaDiff.compare: fields by tag wherever they stand, oneof membership apart."""
        if (id(old), id(new)) in self.entered:
            return
        self.entered.add((id(old), id(new)))
        old_fields, new_fields = {f.number: f for f in old.field}, {f.number: f for f in new.field}
        old_oneof, new_oneof = _oneofs(old), _oneofs(new)
        old_members: dict[str, list[int]] = {}
        for tag, name in old_oneof.items():
            old_members.setdefault(name, []).append(tag)
        new_names = set(new_oneof.values())
        deleted = {name for name, tags in old_members.items()
                   if name not in new_names and not any(t in new_fields for t in tags)}
        new_members: dict[str, list[int]] = {}
        for tag, name in new_oneof.items():
            new_members.setdefault(name, []).append(tag)
        for name, tags in new_members.items():
            groups = {f"oneof:{old_oneof[t]}" if t in old_oneof else f"field:{t}" for t in tags if t in old_fields}
            if len(groups) > 1:
                moved_in = sum(1 for t in tags if t in old_fields and t not in old_oneof)
                self.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else "FIELD_MOVED_TO_EXISTING_ONEOF",
                         f"{path}/{name}")
        for tag in sorted(old_fields.keys() | new_fields.keys()):
            o, n = old_fields.get(tag), new_fields.get(tag)
            if n is None:
                assert o is not None
                if tag in old_oneof:
                    if old_oneof[tag] not in deleted:
                        self.add("ONEOF_FIELD_REMOVED", f"{path}/{old_oneof[tag]}/{tag}")
                elif self.old.label(o) == "required":
                    self.add("REQUIRED_FIELD_REMOVED", f"{path}/{tag}")
            elif o is None:
                if tag not in new_oneof and self.new.label(n) == "required":
                    self.add("REQUIRED_FIELD_ADDED", f"{path}/{tag}")
            else:
                at = f"{path}/{new_oneof[tag]}/{tag}" if tag in new_oneof else f"{path}/{tag}"
                self.field(o, n, self.old.label(o), self.new.label(n), at)
        self.types(list(old.nested_type), list(new.nested_type), path)

    def field(self, o: FieldDescriptorProto, n: FieldDescriptorProto, old_label: str | None,
              new_label: str | None, path: str) -> None:
        """FieldSchemaDiff.compareLabelsAndTypes."""
        old_entry, new_entry = self.old.map_entry(o), self.new.map_entry(n)
        old_kind, new_kind = _kind(o, old_entry), _kind(n, new_entry)
        if old_kind is not new_kind:
            self.add("FIELD_KIND_CHANGED", path)
        elif old_kind is _Kind.SCALAR:
            group = _SCALAR_KIND[o.type]
            if group != _SCALAR_KIND[n.type]:
                self.add("FIELD_SCALAR_KIND_CHANGED", path)
            elif old_label is not None and new_label is not None and old_label != new_label and group != "string":
                self.add("FIELD_NUMERIC_LABEL_CHANGED", path)
        elif old_kind is _Kind.MESSAGE:
            self.named(o.type_name, n.type_name, path)
        else:
            assert old_entry is not None and new_entry is not None
            (ok, ov), (nk, nv) = old_entry.field, new_entry.field
            self.field(ok, nk, None, None, path)
            self.field(ov, nv, None, None, path)


    def named(self, old_type: str, new_type: str, path: str) -> None:
        """FieldSchemaDiff.compareMessageTypes: the same name within its package, and, unless both
        come from the same registered schema, a compatible message under it."""
        old_local, new_local = self.old.local(old_type), self.new.local(new_type)
        if old_local != new_local:
            self.add("FIELD_NAMED_TYPE_CHANGED", path)
            return
        o, n = self.old.messages.get(old_type), self.new.messages.get(new_type)
        if o is None or n is None or (o[2] is not None and o[2] == n[2]):
            return
        sub = _Diff(self.old, self.new, self.roles, self.entered)
        sub.message(o[0], n[0], f"#/{old_local}")
        self.found += sub.found
        if sub.found:
            self.add("FIELD_NAMED_TYPE_CHANGED", path)


def _kind(f: FieldDescriptorProto, entry: DescriptorProto | None) -> _Kind:
    if entry is not None:
        return _Kind.MAP
    return _Kind.MESSAGE if f.type in (F.TYPE_MESSAGE, F.TYPE_GROUP) else _Kind.SCALAR


def _oneofs(m: DescriptorProto) -> dict[int, str]:
    """Each real oneof member's tag and its oneof's name (proto3 `optional` makes a synthetic one)."""
    return {f.number: m.oneof_decl[f.oneof_index].name for f in m.field
            if f.HasField("oneof_index") and not f.proto3_optional}


def incompatibilities(reader: FileDescriptorProto, writer: FileDescriptorProto,
                      roles: tuple[str, str] = ("reader", "writer"),
                      reader_imports: list[tuple[FileDescriptorProto, str]] | None = None,
                      writer_imports: list[tuple[FileDescriptorProto, str]] | None = None) -> list[str]:
    """Why a reader of `reader` cannot read what `writer` wrote (SchemaDiff.compare(writer, reader)
    and its incompatible kinds), naming the two schemas by `roles` ("new", "old" or the other way,
    as the level's direction has it); empty when it can."""
    diff = _Diff(_Side(writer, writer_imports or []), _Side(reader, reader_imports or []), roles, set())
    if writer.package != reader.package:
        diff.add("PACKAGE_CHANGED", "#/")
    diff.types(list(writer.message_type), list(reader.message_type), "#")
    return diff.found
