"""Protobuf schemas as FileDescriptorProto: read from the base64 serialized form that
confluent-kafka's ProtobufSerializer registers (and `?format=serialized` serves back) or from
.proto text (`proto_text`), written as .proto text for everyone else; compared by `proto_compat`."""

from __future__ import annotations

import base64
import binascii
import functools
from typing import Any

from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.descriptor_pb2 import (
    DescriptorProto,
    EnumDescriptorProto,
    FieldDescriptorProto,
    FileDescriptorProto,
)
from google.protobuf.message import DecodeError

from gateway.domain.schemas import proto_text
from gateway.formats import schema_wire

F = FieldDescriptorProto
_SCALARS = {
    F.TYPE_DOUBLE: "double", F.TYPE_FLOAT: "float", F.TYPE_INT64: "int64", F.TYPE_UINT64: "uint64",
    F.TYPE_INT32: "int32", F.TYPE_FIXED64: "fixed64", F.TYPE_FIXED32: "fixed32", F.TYPE_BOOL: "bool",
    F.TYPE_STRING: "string", F.TYPE_BYTES: "bytes", F.TYPE_UINT32: "uint32", F.TYPE_SFIXED32: "sfixed32",
    F.TYPE_SFIXED64: "sfixed64", F.TYPE_SINT32: "sint32", F.TYPE_SINT64: "sint64",
}


def descriptor(text: str, deps: list[FileDescriptorProto]) -> FileDescriptorProto:
    """The file a schema string describes, `.proto` text or base64 of a serialized
    FileDescriptorProto (what confluent-kafka registers), checked by building it with the files it
    imports (`deps`) as protoc would: ValueError naming what is wrong."""
    try:
        fd = FileDescriptorProto.FromString(base64.b64decode(text.strip(), validate=True))
    except (binascii.Error, DecodeError, ValueError):
        fd = proto_text.parse(text, [*deps, *well_known().values()])
    if not fd.message_type and not fd.enum_type:
        raise ValueError("the file defines no message and no enum")
    _pool(fd, deps)
    return fd


def _pool(fd: FileDescriptorProto, deps: list[FileDescriptorProto]) -> descriptor_pool.DescriptorPool:
    """A pool holding `fd`, the files it imports and the well-known types; ValueError in the pool's
    words (an unknown type, a field number used twice, ...) when they do not build."""
    known = well_known()
    pool = descriptor_pool.DescriptorPool()
    given = {d.name for d in deps}
    try:
        for name in [d for d in known if d not in given]:
            pool.Add(known[name])
        for d in deps:
            pool.Add(d)
        pool.Add(fd)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    return pool


def decode(fd: FileDescriptorProto, deps: list[FileDescriptorProto], payload: bytes) -> tuple[str, dict[str, Any]]:
    """A value in Confluent's Protobuf wire format past its magic byte and schema id: its message
    indexes (`gateway.formats.schema_wire`) pick the message type of `fd`, the rest is the message.
    Returns the type's full name and the message in protobuf's JSON mapping with the .proto field
    names; ValueError (or WireFormatError) when the bytes are not such a message."""
    indexes, at = schema_wire.message_indexes_of(payload, 0)
    path, scope = [], list(fd.message_type)
    for i in indexes:
        if not 0 <= i < len(scope):
            raise ValueError(f"message index {i} out of range")
        path.append(scope[i].name)
        scope = list(scope[i].nested_type)
    name = ".".join([fd.package, *path] if fd.package else path)
    message = message_factory.GetMessageClass(_pool(fd, deps).FindMessageTypeByName(name))()
    try:
        message.ParseFromString(payload[at:])
    except DecodeError as exc:
        raise ValueError(str(exc)) from None
    return name, json_format.MessageToDict(message, preserving_proto_field_name=True)


@functools.cache
def well_known() -> dict[str, FileDescriptorProto]:
    """Protobuf's well-known types (google/protobuf/timestamp.proto, ...), which a schema imports
    without a reference: Confluent's serializers skip them (`skip.known.types`) and its registry
    knows them."""
    from google.protobuf import (  # noqa: F401  (imported for the files they add to the default pool)
        any_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )

    out = {}
    for name in ("any", "duration", "empty", "field_mask", "struct", "timestamp", "wrappers"):
        fd = FileDescriptorProto()
        descriptor_pool.Default().FindFileByName(f"google/protobuf/{name}.proto").CopyToProto(fd)
        out[fd.name] = fd
    return out


def serialized(fd: FileDescriptorProto) -> str:
    return base64.standard_b64encode(fd.SerializeToString(deterministic=True)).decode()


def identity(fd: FileDescriptorProto, normalize: bool) -> str:
    if normalize:  # options and source info say nothing of the wire
        fd = FileDescriptorProto.FromString(fd.SerializeToString())
        fd.ClearField("source_code_info")
    return fd.SerializeToString(deterministic=True).hex()


def render(fd: FileDescriptorProto) -> str:
    """The .proto text of `fd`, as Confluent's registry serves a Protobuf schema by default."""
    out = [f'syntax = "{fd.syntax or "proto2"}";']
    if fd.package:
        out.append(f"package {fd.package};")
    out += [f'import "{d}";' for d in fd.dependency]
    for m in fd.message_type:
        out += _message(m, "", fd.syntax == "proto3")
    for e in fd.enum_type:
        out += _enum(e, "")
    return "\n".join(out) + "\n"


def _type_name(f: FieldDescriptorProto) -> str:
    return _SCALARS.get(f.type) or f.type_name


def _message(m: DescriptorProto, pad: str, proto3: bool) -> list[str]:
    out = [f"{pad}message {m.name} {{"]
    maps = {n.name: n for n in m.nested_type if n.options.map_entry}
    inner = pad + "  "
    oneofs: dict[int, list[FieldDescriptorProto]] = {}
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            oneofs.setdefault(f.oneof_index, []).append(f)
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            fields = oneofs.pop(f.oneof_index, [])  # the whole oneof where its first field stands
            if fields:
                out.append(f"{inner}oneof {m.oneof_decl[f.oneof_index].name} {{")
                out += [f"{inner}  {_type_name(g)} {g.name} = {g.number};" for g in fields]
                out.append(f"{inner}}}")
            continue
        entry = maps.get(f.type_name.rsplit(".", 1)[-1]) if f.type == F.TYPE_MESSAGE else None
        if entry is not None and f.label == F.LABEL_REPEATED:
            key, value = entry.field
            out.append(f"{inner}map<{_type_name(key)}, {_type_name(value)}> {f.name} = {f.number};")
            continue
        label = {F.LABEL_REPEATED: "repeated ", F.LABEL_REQUIRED: "required "}.get(f.label, "")
        if f.label == F.LABEL_OPTIONAL and (f.proto3_optional or not proto3):
            label = "optional "
        out.append(f"{inner}{label}{_type_name(f)} {f.name} = {f.number};")
    for n in m.nested_type:
        if not n.options.map_entry:
            out += _message(n, inner, proto3)
    for e in m.enum_type:
        out += _enum(e, inner)
    out.append(f"{pad}}}")
    return out


def _enum(e: EnumDescriptorProto, pad: str) -> list[str]:
    return [f"{pad}enum {e.name} {{", *(f"{pad}  {v.name} = {v.number};" for v in e.value), f"{pad}}}"]
