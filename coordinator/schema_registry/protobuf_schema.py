"""Protobuf schemas: parsed into ``FileDescriptorProto``s by protoc itself, compared by the
wire-format rules Confluent's registry applies.

Parsing: a schema is either ``.proto`` text or (what confluent-kafka's serializer
registers) a base64 ``FileDescriptorProto``. Text is compiled by protoc from grpcio-tools
(``python -m grpc_tools.protoc``, in a child process: a crash or hang in the compiler can't
take the registry with it, and its error message becomes the 42201 answer), with each
reference written as a file under its import name and Google's well-known types on the
include path. Results are cached by text.

Compatibility (``can_read(reader, writer)``; BACKWARD is new-reads-old), by Confluent's
names for the differences: incompatible are PACKAGE_CHANGED, MESSAGE_REMOVED,
FIELD_KIND_CHANGED (scalar, message, enum swapped), FIELD_SCALAR_KIND_CHANGED (outside the
wire-compatible groups int32/uint32/int64/uint64/bool, sint32/sint64, fixed32/sfixed32,
fixed64/sfixed64, string/bytes), FIELD_NAMED_TYPE_CHANGED (another message or enum type),
FIELD_LABEL_CHANGED (singular <-> repeated), REQUIRED_FIELD_ADDED/REMOVED (proto2),
ONEOF_FIELD_REMOVED and MULTIPLE_FIELDS_MOVED_TO_ONEOF. Compatible: fields, messages,
enums, oneofs and enum values added; fields and enum values removed; fields renamed.
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
import re
import subprocess
import sys
import tempfile

from google.protobuf import descriptor_pb2

FDP = descriptor_pb2.FileDescriptorProto
FD = descriptor_pb2.FieldDescriptorProto
MAIN_FILE = "schema.proto"
PROTOC_TIMEOUT_S = 60.0
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")
_GROUPS = [{FD.TYPE_INT32, FD.TYPE_UINT32, FD.TYPE_INT64, FD.TYPE_UINT64, FD.TYPE_BOOL},
           {FD.TYPE_SINT32, FD.TYPE_SINT64}, {FD.TYPE_FIXED32, FD.TYPE_SFIXED32},
           {FD.TYPE_FIXED64, FD.TYPE_SFIXED64}, {FD.TYPE_STRING, FD.TYPE_BYTES}]


class ProtobufParseError(ValueError):
    """The text is not a valid .proto file (protoc's message)."""


def _as_descriptor(text: str) -> FDP | None:
    """A base64 FileDescriptorProto, or None when ``text`` is not one."""
    if "{" in text or not _BASE64.fullmatch(text.strip() or "x"):
        return None
    try:
        fdp = FDP.FromString(base64.b64decode(text.strip(), validate=False))
    except (binascii.Error, ValueError, Exception):  # DecodeError is not a ValueError
        return None
    return fdp if fdp.message_type or fdp.enum_type or fdp.package else None


def _protoc_include() -> str:
    try:
        import grpc_tools
    except ImportError:
        raise ProtobufParseError("a .proto text schema needs protoc from grpcio-tools: "
                                 "pip install 'txnlog[schema-registry]'") from None
    return os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")


@functools.lru_cache(maxsize=512)
def parse(text: str, references: tuple[tuple[str, str], ...] = ()) -> FDP:
    """The schema's descriptor. ``references``: (import name, schema text) of every schema
    it imports, transitively."""
    fdp = _as_descriptor(text)
    if fdp is not None:
        return fdp
    include = _protoc_include()
    with tempfile.TemporaryDirectory(prefix="txnlog-proto-") as tmp:
        for name, ref_text in references:
            path = os.path.normpath(os.path.join(tmp, name))
            if not path.startswith(tmp + os.sep):
                raise ProtobufParseError(f"reference name {name!r} leaves the import root")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            ref_fdp = _as_descriptor(ref_text)
            if ref_fdp is not None:
                ref_text = to_text(ref_fdp)
            with open(path, "w") as f:
                f.write(ref_text)
        with open(os.path.join(tmp, MAIN_FILE), "w") as f:
            f.write(text)
        out = os.path.join(tmp, "out.pb")
        try:
            done = subprocess.run(
                [sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp}",
                 f"-I{include}", f"--descriptor_set_out={out}", MAIN_FILE],
                capture_output=True, text=True, timeout=PROTOC_TIMEOUT_S, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise ProtobufParseError("protoc did not finish in time") from None
        if done.returncode != 0 or not os.path.exists(out):
            msg = (done.stderr or done.stdout).strip().replace(tmp + os.sep, "")
            raise ProtobufParseError(msg or f"protoc exited with {done.returncode}")
        with open(out, "rb") as f:
            fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    return fds.file[-1]


def serialized(fdp: FDP) -> str:
    """Confluent's ``format=serialized``: the descriptor in base64."""
    return base64.b64encode(fdp.SerializeToString()).decode("ascii")


def to_text(fdp: FDP) -> str:
    """A .proto text for a descriptor (for a base64 reference a text schema imports):
    messages, fields, enums, nested types, oneofs; enough to compile against."""
    lines = [f'syntax = "{fdp.syntax or "proto2"}";']
    if fdp.package:
        lines.append(f"package {fdp.package};")
    lines += [f'import "{d}";' for d in fdp.dependency]
    for m in fdp.message_type:
        lines += _message_text(m, fdp.syntax or "proto2", "")
    for e in fdp.enum_type:
        lines += _enum_text(e, "")
    return "\n".join(lines) + "\n"


_TYPE_NAMES = {v: k[len("TYPE_"):].lower() for k, v in FD.Type.items()}


def _field_type(f: FD) -> str:
    return f.type_name if f.type in (FD.TYPE_MESSAGE, FD.TYPE_ENUM) else _TYPE_NAMES[f.type]


def _message_text(m: descriptor_pb2.DescriptorProto, syntax: str, ind: str) -> list[str]:
    out = [f"{ind}message {m.name} {{"]
    for n in m.nested_type:
        out += _message_text(n, syntax, ind + "  ")
    for e in m.enum_type:
        out += _enum_text(e, ind + "  ")
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            continue
        label = {FD.LABEL_REPEATED: "repeated ", FD.LABEL_REQUIRED: "required "}.get(
            f.label, "optional " if syntax == "proto2" or f.proto3_optional else "")
        out.append(f"{ind}  {label}{_field_type(f)} {f.name} = {f.number};")
    for i, o in enumerate(m.oneof_decl):
        members = [f for f in m.field if f.HasField("oneof_index") and f.oneof_index == i
                   and not f.proto3_optional]
        if members:
            out.append(f"{ind}  oneof {o.name} {{")
            out += [f"{ind}    {_field_type(f)} {f.name} = {f.number};" for f in members]
            out.append(f"{ind}  }}")
    out.append(f"{ind}}}")
    return out


def _enum_text(e: descriptor_pb2.EnumDescriptorProto, ind: str) -> list[str]:
    return [f"{ind}enum {e.name} {{", *(f"{ind}  {v.name} = {v.number};" for v in e.value),
            f"{ind}}}"]


# ---------------------------------------------------------------------------- compatibility


def _messages(fdp: FDP) -> dict[str, descriptor_pb2.DescriptorProto]:
    out: dict[str, descriptor_pb2.DescriptorProto] = {}

    def walk(m: descriptor_pb2.DescriptorProto, prefix: str) -> None:
        name = f"{prefix}.{m.name}"
        out[name] = m
        for n in m.nested_type:
            walk(n, name)

    for m in fdp.message_type:
        walk(m, f".{fdp.package}" if fdp.package else "")
    return out


def _kind(f: FD) -> str:
    return {FD.TYPE_MESSAGE: "message", FD.TYPE_GROUP: "message",
            FD.TYPE_ENUM: "enum"}.get(f.type, "scalar")


def _oneof(m: descriptor_pb2.DescriptorProto, f: FD) -> str | None:
    if f.HasField("oneof_index") and not f.proto3_optional:
        return m.oneof_decl[f.oneof_index].name
    return None


def can_read(reader: FDP, writer: FDP) -> list[str]:
    """Why data written with ``writer`` is not read right with ``reader`` (empty: it is)."""
    problems: list[str] = []

    def fail(kind: str, where: str) -> None:
        problems.append(f"{{type:{kind}, location:{where}}}")

    if reader.package != writer.package:
        fail("PACKAGE_CHANGED", "#/package")
    rm, wm = _messages(reader), _messages(writer)
    strip_r = f".{reader.package}" if reader.package else ""
    strip_w = f".{writer.package}" if writer.package else ""
    for name, w in wm.items():
        local = name[len(strip_w):]
        r = rm.get(strip_r + local)
        if r is None:
            fail("MESSAGE_REMOVED", f"#/{local.lstrip('.')}")
            continue
        rf = {f.number: f for f in r.field}
        moved_to: dict[str, int] = {}
        for f in w.field:
            at = f"#/{local.lstrip('.')}/{f.number}"
            g = rf.pop(f.number, None)
            if g is None:
                if f.label == FD.LABEL_REQUIRED:
                    fail("REQUIRED_FIELD_REMOVED", at)
                elif _oneof(w, f) is not None:
                    fail("ONEOF_FIELD_REMOVED", at)
                continue
            if _kind(f) != _kind(g):
                fail("FIELD_KIND_CHANGED", at)
            elif _kind(f) == "scalar":
                if f.type != g.type and not any(f.type in s and g.type in s for s in _GROUPS):
                    fail("FIELD_SCALAR_KIND_CHANGED", at)
            elif f.type_name[len(strip_w):] != g.type_name[len(strip_r):] \
                    and not f.type_name.endswith("Entry"):
                fail("FIELD_NAMED_TYPE_CHANGED", at)
            if (f.label == FD.LABEL_REPEATED) != (g.label == FD.LABEL_REPEATED):
                fail("FIELD_LABEL_CHANGED", at)
            if (f.label == FD.LABEL_REQUIRED) != (g.label == FD.LABEL_REQUIRED):
                fail("REQUIRED_FIELD_ADDED" if g.label == FD.LABEL_REQUIRED
                     else "REQUIRED_FIELD_REMOVED", at)
            if _oneof(w, f) is None and (o := _oneof(r, g)) is not None:
                moved_to[o] = moved_to.get(o, 0) + 1
        for o, n in moved_to.items():
            if n > 1:
                fail("MULTIPLE_FIELDS_MOVED_TO_ONEOF", f"#/{local.lstrip('.')}/{o}")
        for g in rf.values():
            if g.label == FD.LABEL_REQUIRED:
                fail("REQUIRED_FIELD_ADDED", f"#/{local.lstrip('.')}/{g.number}")
    return problems
