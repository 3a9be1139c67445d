"""`.proto` text read into a FileDescriptorProto, for the schemas people register by hand (curl,
Java's KafkaProtobufSerializer): proto2 and proto3 messages, enums, nested types, oneofs, maps,
`optional`, imports and packages. Options, services, extensions and reserved ranges are read past
and not kept: the registry compares what reaches the wire (Protobuf's language guide, "Language
Specification")."""

from __future__ import annotations

import re

from google.protobuf.descriptor_pb2 import (
    DescriptorProto,
    EnumDescriptorProto,
    FieldDescriptorProto,
    FileDescriptorProto,
)

F = FieldDescriptorProto
_TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|("(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\')|([A-Za-z_.][\w.]*)|'
                    r'(-?(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?))|([{}\[\]()<>=;,:])', re.S)
_SCALAR = {n: getattr(F, f"TYPE_{n.upper()}") for n in (
    "double", "float", "int64", "uint64", "int32", "fixed64", "fixed32", "bool", "string", "bytes", "uint32",
    "sfixed32", "sfixed64", "sint32", "sint64")}
_LABELS = {"optional": F.LABEL_OPTIONAL, "required": F.LABEL_REQUIRED, "repeated": F.LABEL_REPEATED}


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"unexpected character {text[pos]!r} at offset {pos}")
        pos = m.end()
        token = next((g for g in m.groups() if g is not None), None)
        if token is not None:
            out.append(token)
    return out


class _Reader:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> str:
        return self.toks[self.i] if self.i < len(self.toks) else ""

    def next(self) -> str:
        if self.i >= len(self.toks):
            raise ValueError("unexpected end of the schema")
        self.i += 1
        return self.toks[self.i - 1]

    def expect(self, token: str) -> None:
        got = self.next()
        if got != token:
            raise ValueError(f"expected {token!r}, found {got!r}")

    def skip_statement(self) -> None:
        """Past the next `;` or balanced `{...}` block."""
        depth = 0
        while True:
            t = self.next()
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
                if depth == 0:
                    return
            elif t == ";" and depth == 0:
                return

    def skip_options(self) -> None:
        if self.peek() == "[":
            while self.next() != "]":
                pass


def parse(text: str, deps: list[FileDescriptorProto]) -> FileDescriptorProto:
    r = _Reader(text)
    fd = FileDescriptorProto(name="schema.proto", syntax="proto2")
    pending: list[tuple[FieldDescriptorProto, str, str]] = []  # field, written type, scope
    while r.peek():
        t = r.next()
        if t == "syntax":
            r.expect("=")
            fd.syntax = r.next().strip("\"'")
            r.expect(";")
        elif t == "package":
            fd.package = r.next()
            r.expect(";")
        elif t == "import":
            name = r.next()
            if name in ("public", "weak"):
                name = r.next()
            fd.dependency.append(name.strip("\"'"))
            r.expect(";")
        elif t == "message":
            _message(r, fd.message_type.add(), "." + fd.package if fd.package else "", fd.syntax, pending)
        elif t == "enum":
            _enum(r, fd.enum_type.add())
        elif t in ("option", "service", "extend"):
            r.skip_statement()
        elif t != ";":
            raise ValueError(f"unexpected {t!r}")
    known = _names(fd) | {n for d in deps for n in _names(d)}
    for f, written, scope in pending:
        f.type_name, is_enum = _resolve(written, scope, known)
        f.type = F.TYPE_ENUM if is_enum else F.TYPE_MESSAGE
    return fd


def _message(r: _Reader, m: DescriptorProto, scope: str, syntax: str,
             pending: list[tuple[FieldDescriptorProto, str, str]]) -> None:
    m.name = r.next()
    here = f"{scope}.{m.name}"
    r.expect("{")
    while (t := r.next()) != "}":
        if t == "message":
            _message(r, m.nested_type.add(), here, syntax, pending)
        elif t == "enum":
            _enum(r, m.enum_type.add())
        elif t == "oneof":
            index = len(m.oneof_decl)
            m.oneof_decl.add(name=r.next())
            r.expect("{")
            while (u := r.next()) != "}":
                if u == "option":
                    r.skip_statement()
                    continue
                f = _field(r, m, u, F.LABEL_OPTIONAL, here, pending)
                f.oneof_index = index
        elif t in ("option", "reserved", "extensions", "extend"):
            r.skip_statement()
        elif t == "map":
            r.expect("<")
            key = r.next()
            r.expect(",")
            value = r.next()
            r.expect(">")
            name = r.next()
            entry = m.nested_type.add(name="".join(p.capitalize() for p in name.split("_")) + "Entry")
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, label=F.LABEL_OPTIONAL, type=_SCALAR[key])
            _typed(entry.field.add(name="value", number=2, label=F.LABEL_OPTIONAL), value, here, pending)
            r.expect("=")
            m.field.add(name=name, number=int(r.next(), 0), label=F.LABEL_REPEATED, type=F.TYPE_MESSAGE,
                        type_name=f"{here}.{entry.name}")
            r.skip_options()
            r.expect(";")
        elif t != ";":
            label = _LABELS.get(t)
            f = _field(r, m, r.next() if label is not None else t, label or F.LABEL_OPTIONAL, here, pending)
            if t == "optional" and syntax == "proto3":
                f.proto3_optional = True
    for f in m.field:  # a proto3 optional field's synthetic oneof, after every real one (protoc's order)
        if f.proto3_optional:
            f.oneof_index = len(m.oneof_decl)
            m.oneof_decl.add(name=f"_{f.name}")


def _field(r: _Reader, m: DescriptorProto, written: str, label: int, scope: str,
           pending: list[tuple[FieldDescriptorProto, str, str]]) -> FieldDescriptorProto:
    f = m.field.add(name=r.next(), label=label)
    _typed(f, written, scope, pending)
    r.expect("=")
    f.number = int(r.next(), 0)
    r.skip_options()
    r.expect(";")
    return f


def _typed(f: FieldDescriptorProto, written: str, scope: str,
           pending: list[tuple[FieldDescriptorProto, str, str]]) -> None:
    if written in _SCALAR:
        f.type = _SCALAR[written]
    else:
        pending.append((f, written, scope))


def _enum(r: _Reader, e: EnumDescriptorProto) -> None:
    e.name = r.next()
    r.expect("{")
    while (t := r.next()) != "}":
        if t in ("option", "reserved"):
            r.skip_statement()
        elif t != ";":
            r.expect("=")
            e.value.add(name=t, number=int(r.next(), 0))
            r.skip_options()
            r.expect(";")


def _names(fd: FileDescriptorProto) -> set[tuple[str, bool]]:
    """Every message and enum the file defines: (full name with a leading dot, whether an enum)."""
    out: set[tuple[str, bool]] = set()

    def walk(prefix: str, ms: list[DescriptorProto]) -> None:
        for m in ms:
            name = f"{prefix}.{m.name}"
            out.add((name, False))
            out.update((f"{name}.{e.name}", True) for e in m.enum_type)
            walk(name, list(m.nested_type))

    top = "." + fd.package if fd.package else ""
    out.update((f"{top}.{e.name}", True) for e in fd.enum_type)
    walk(top, list(fd.message_type))
    return out


def _resolve(written: str, scope: str, known: set[tuple[str, bool]]) -> tuple[str, bool]:
    """Protobuf's scoping: the innermost scope first, then each one out."""
    candidates = [written] if written.startswith(".") else []
    parts = scope.split(".") if scope else [""]
    while not written.startswith("."):
        candidates.append(".".join([*parts, written]) if parts != [""] else "." + written)
        if len(parts) <= 1:
            break
        parts = parts[:-1]
    for c in candidates:
        for is_enum in (False, True):
            if (c, is_enum) in known:
                return c, is_enum
    raise ValueError(f"unknown type {written}")
