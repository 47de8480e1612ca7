"""``txnlog dump``: kafka-dump-log's output for ``.log``, ``.index``, ``.timeindex``, ``.txnindex``.

A shared object (``_wal/*.wal``) prints each partition's run under a line naming it.

Kafka's decoders (``--offsets-decoder``, ``--transaction-log-decoder``, also for txnlog's own
``__transaction_state`` records: ``dump_decoders.py``) and index checks
(``--index-sanity-check``, ``--verify-index-only``) work as in DumpLogSegments; keys and
payloads print through a decoder loaded by name (``--key-decoder``/``--value-decoder``,
Kafka's ``--key-decoder-class``/``--value-decoder-class``).

The lines are Kafka's DumpLogSegments format token for token, so scripts and eyes trained on
kafka-dump-log read ours unchanged. Files are local paths or any fsspec URL. Where Kafka's
tool would die on a stack trace (a batch or record that does not parse), we print the error
on stderr, stop that file and return a non-zero status.
"""

from __future__ import annotations

import argparse
import posixpath
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from ..errors import LogFormatError
from .batch_header import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    BatchHeader,
)
from .compression import Codec
from .control import ControlType, parse_control_key, parse_end_txn_marker
from .crc import crc32c
from .dump_decoders import DECODERS
from .indexes import OFFSET_ENTRY, OFFSET_ENTRY_SIZE, TIME_ENTRY, TIME_ENTRY_SIZE, decode_txn_index
from .records import decode_batch

RECORD_INDENT = "|"
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1  # FileLogInputStream stops below this
RECORD_OVERHEAD_V0 = 14  # smallest legal batch size field (legacy message v0)
INT_MAX = 0x7FFFFFFF


@dataclass
class DumpOptions:
    deep_iteration: bool = False
    print_data_log: bool = False
    skip_record_metadata: bool = False
    max_bytes: int = INT_MAX
    decoder: str | None = None  # "offsets" or "transaction-log" (dump_decoders.DECODERS)
    # kafka-dump-log's --key-decoder-class/--value-decoder-class: bytes -> text
    key_decoder: Callable[[bytes], str] | None = None
    value_decoder: Callable[[bytes], str] | None = None
    index_sanity_check: bool = False
    verify_index_only: bool = False


@dataclass
class _Problems:
    """Findings Kafka prints on stderr after all files (mismatches, gaps)."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def print(self, err: TextIO) -> None:
        for name, pairs in self.index_mismatches.items():
            print(f"Mismatches in :{name}", file=err)
            for index_offset, log_offset in reversed(pairs):  # Kafka prepends
                print(f"  Index offset: {index_offset}, log offset: {log_offset}", file=err)
        for name, pairs in self.time_mismatches.items():
            print(f"Found timestamp mismatch in :{name}", file=err)
            for a, b in pairs:
                print(f"  Index timestamp: {a}, log timestamp: {b}", file=err)
        for name, pairs in self.time_out_of_order.items():
            print(f"Found out of order timestamp in :{name}", file=err)
            for a, b in pairs:
                print(f"  Index timestamp: {a}, Previously indexed timestamp: {b}", file=err)
        for pairs in self.time_not_found.values():
            print("The following indexed offsets are not found in the log.", file=err)
            for a, b in pairs:
                print(f"Indexed offset: {a}, found log offset: {b}", file=err)
        for name, pairs in self.non_consecutive.items():
            print(f"Non-consecutive offsets in {name}", file=err)
            for a, b in reversed(pairs):
                print(f"  {a} is followed by {b}", file=err)


# --------------------------------------------------------------------------- file access

def _read(path: str) -> bytes:
    import fsspec

    with fsspec.open(path, "rb") as f:
        return f.read()


def _exists(path: str) -> bool:
    import fsspec

    fs, _, paths = fsspec.get_fs_token_paths(path)
    return fs.exists(paths[0])


def _name(path: str) -> str:
    return posixpath.basename(path.rstrip("/"))


def _sibling(path: str, suffix: str) -> str:
    stem = path[:len(path) - len(_name(path))] + _name(path).split(".")[0]
    return stem + suffix


def _base_offset(path: str) -> int:
    return int(_name(path).split(".")[0])


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


def _java_string(data: bytes) -> str:
    """Kafka's StringDecoder: UTF-8 with replacement characters."""
    return data.decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- .log

@dataclass(frozen=True)
class _FileBatch:
    """A batch as FileLogInputStream sees it: header fields, read without validation."""

    header: BatchHeader
    is_valid: bool


def _file_batches(data: bytes, name: str) -> tuple[list[_FileBatch], int, str | None]:
    """Batches Kafka's FileRecords would iterate, the valid byte count, and a fatal error."""
    pos, end = 0, len(data)
    out: list[_FileBatch] = []
    while pos < end - HEADER_SIZE_UP_TO_MAGIC:
        _, size = struct.unpack_from(">qi", data, pos)
        if size < RECORD_OVERHEAD_V0:
            return out, pos, (f"Found record size {size} smaller than minimum record overhead "
                              f"({RECORD_OVERHEAD_V0}) in file {name}.")
        if pos > end - LOG_OVERHEAD - size:
            break
        magic = data[pos + MAGIC_OFFSET]
        if magic != MAGIC:
            return out, pos, (f"batch at byte position {pos} has magic {magic}: only magic 2 "
                              f"is supported")
        if LOG_OVERHEAD + size < HEADER_SIZE:
            return out, pos, (f"batch at byte position {pos} is {LOG_OVERHEAD + size} bytes, "
                              f"smaller than the {HEADER_SIZE}-byte v2 header")
        header = BatchHeader(*HEADER.unpack_from(data, pos), position=pos)
        valid = crc32c(memoryview(data)[pos + ATTRIBUTES_OFFSET:pos + header.size]) == header.crc
        out.append(_FileBatch(header, valid))
        pos += header.size
    return out, pos, None


def _batch_line(h: BatchHeader, valid: bool) -> str:
    horizon = (f"OptionalLong[{h.base_timestamp}]" if h.has_delete_horizon
               else "OptionalLong.empty")
    ts_type = "LogAppendTime" if h.timestamp_type else "CreateTime"
    try:
        codec = Codec(h.compression).kafka_name
    except ValueError:
        codec = f"unknown({h.compression})"
    return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
            f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
            f"partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {_java_bool(h.is_transactional)} "
            f"isControl: {_java_bool(h.is_control)} deleteHorizonMs: {horizon} "
            f"position: {h.position} {ts_type}: {h.max_timestamp} size: {h.size} "
            f"magic: {h.magic} compresscodec: {codec} crc: {h.crc} isvalid: {_java_bool(valid)}")


def _control_text(key: bytes | None, value: bytes | None) -> str:
    _, control_type = parse_control_key(key)
    if control_type.is_end_txn:
        epoch = parse_end_txn_marker(value)[1]
        return f" endTxnMarker: {control_type.name} coordinatorEpoch: {epoch}"
    type_id = struct.unpack_from(">h", key, 2)[0] if key else -1
    # Kafka prints KRaft control records as JSON; we name the type and id.
    name = control_type.name if control_type is not ControlType.UNKNOWN else "UNKNOWN"
    return f" controlType: {name}({type_id})"


def dump_log(path: str, data: bytes, opts: DumpOptions, out: TextIO, err: TextIO,
             problems: _Problems) -> int:
    """Print one segment as kafka-dump-log does; returns 0, or 1 after a fatal error."""
    name = _name(path)
    if name.endswith(".log"):
        print(f"Log starting offset: {_base_offset(path)}", file=out)
    view = data[:opts.max_bytes] if opts.max_bytes < len(data) else data
    deep = opts.deep_iteration or opts.print_data_log
    batches, valid_bytes, fatal = _file_batches(view, name)
    last_offset = -1
    for fb in batches:
        h = fb.header
        print(_batch_line(h, fb.is_valid), file=out)
        if not deep:
            continue
        try:
            records = decode_batch(view, h.position, verify_crc=False, source=name).records
        except LogFormatError as exc:
            print(f"Error: {exc}", file=err)
            return 1
        ts_type = "LogAppendTime" if h.timestamp_type else "CreateTime"
        for rec in records:
            if last_offset != -1 and rec.offset != last_offset + 1:
                problems.non_consecutive.setdefault(path, []).append((last_offset, rec.offset))
            last_offset = rec.offset
            parts = []
            prefix = f"{RECORD_INDENT} "
            if not opts.skip_record_metadata:
                key_size = -1 if rec.key is None else len(rec.key)
                value_size = -1 if rec.value is None else len(rec.value)
                parts.append(f"{prefix}offset: {rec.offset} {ts_type}: {rec.timestamp} "
                             f"keySize: {key_size} valueSize: {value_size}")
                prefix = " "
                header_keys = ",".join(k for k, _ in rec.headers)
                parts.append(f" sequence: {rec.sequence} headerKeys: [{header_keys}]")
                if h.is_control:
                    try:
                        parts.append(_control_text(rec.key, rec.value))
                    except LogFormatError as exc:
                        print("".join(parts), file=out)
                        print(f"Error: {exc} (control record at offset {rec.offset})",
                              file=err)
                        return 1
            if opts.print_data_log and not h.is_control and opts.decoder:
                try:
                    key_text, payload = DECODERS[opts.decoder](rec.key, rec.value, rec.offset)
                except LogFormatError as exc:
                    print("".join(parts), file=out)
                    print(f"Error: {exc}", file=err)
                    return 1
                if key_text is not None:
                    parts.append(f"{prefix}key: {key_text}")
                if payload is not None:
                    parts.append(f" payload: {payload}")
            elif opts.print_data_log and not h.is_control:
                if rec.key is not None:
                    parts.append(f"{prefix}key: {_decoded(opts.key_decoder, rec.key)}")
                if rec.value is not None:
                    parts.append(f" payload: {_decoded(opts.value_decoder, rec.value)}")
            print("".join(parts), file=out)
    if fatal is not None:
        print(f"Error: {fatal}", file=err)
        return 1
    trailing = len(view) - valid_bytes
    if trailing > 0 and opts.max_bytes == INT_MAX:
        print(f"Found {trailing} invalid bytes at the end of {name}", file=out)
    return 0


# --------------------------------------------------------------------------- indexes

def _log_batches_or_none(path: str) -> list[_FileBatch] | None:
    log_path = _sibling(path, ".log")
    try:
        if not _exists(log_path):
            return None
        return _file_batches(_read(log_path), _name(log_path))[0]
    except (OSError, ValueError):
        return None


def dump_index(path: str, data: bytes, opts: DumpOptions, out: TextIO,
               problems: _Problems) -> int:
    """``offset: O position: P`` per entry (DumpLogSegments.dumpIndex)."""
    base = _base_offset(path)
    entries = len(data) // OFFSET_ENTRY_SIZE
    if opts.index_sanity_check:
        return _sanity(path, data, OFFSET_ENTRY_SIZE, base, out, _offset_index_problem)
    if entries == 0:
        print(f"{path} is empty.", file=out)
        return 0
    batches = _log_batches_or_none(path)
    by_position = {b.header.position: b.header for b in batches} if batches is not None else {}
    for i in range(entries):
        rel, position = OFFSET_ENTRY.unpack_from(data, i * OFFSET_ENTRY_SIZE)
        offset = base + rel
        if offset == base and i > 0:  # zero entries of a preallocated index
            break
        if batches is not None:
            first = by_position.get(position)
            if first is None:  # Kafka slices the log there: the next batch at or after it
                first = next((b.header for b in batches if b.header.position >= position), None)
            if first is not None and first.last_offset != offset:
                problems.index_mismatches.setdefault(path, []).append(
                    (offset, first.last_offset))
        if not opts.verify_index_only:
            print(f"offset: {offset} position: {position}", file=out)
    return 0


def dump_time_index(path: str, data: bytes, opts: DumpOptions, out: TextIO,
                    problems: _Problems) -> int:
    """``timestamp: T offset: O`` per entry (DumpLogSegments.dumpTimeIndex)."""
    base = _base_offset(path)
    if opts.index_sanity_check:
        return _sanity(path, data, TIME_ENTRY_SIZE, base, out, _time_index_problem)
    batches = _log_batches_or_none(path)
    prev_ts = -1
    log_data = _read(_sibling(path, ".log")) if batches else b""
    for i in range(len(data) // TIME_ENTRY_SIZE):
        timestamp, rel = TIME_ENTRY.unpack_from(data, i * TIME_ENTRY_SIZE)
        offset = base + rel
        if offset == base and i > 0:
            break
        if batches is not None:
            batch = next((b.header for b in batches if b.header.last_offset >= offset), None)
            if batch is None:
                problems.time_not_found.setdefault(path, []).append((offset, -1))
            elif batch.last_offset != offset:
                problems.time_not_found.setdefault(path, []).append((offset, batch.last_offset))
            else:
                try:
                    recs = decode_batch(log_data, batch.position, verify_crc=False).records
                    max_ts = max((r.timestamp for r in recs), default=-1)
                except LogFormatError:
                    max_ts = -1
                if max_ts != timestamp:
                    problems.time_mismatches.setdefault(path, []).append((timestamp, max_ts))
                if prev_ts >= timestamp:
                    problems.time_out_of_order.setdefault(path, []).append((timestamp, prev_ts))
        if not opts.verify_index_only:
            print(f"timestamp: {timestamp} offset: {offset}", file=out)
        prev_ts = timestamp
    return 0


def _offset_index_problem(data: bytes, entries: int, base: int) -> str | None:
    """OffsetIndex.sanityCheck: the last entry's offset must not be below the base."""
    last = base + OFFSET_ENTRY.unpack_from(data, (entries - 1) * OFFSET_ENTRY_SIZE)[0]
    if last < base:
        return (f"Corrupt index found, index file has non-zero size but the last offset is "
                f"{last} which is less than the base offset {base}.")
    return None


def _time_index_problem(data: bytes, entries: int, base: int) -> str | None:
    """TimeIndex.sanityCheck: last timestamp >= first, last offset >= base."""
    first_ts = TIME_ENTRY.unpack_from(data, 0)[0]
    last_ts, rel = TIME_ENTRY.unpack_from(data, (entries - 1) * TIME_ENTRY_SIZE)
    if last_ts < first_ts:
        return (f"Corrupt time index found, time index file has non-zero size but the last "
                f"timestamp is {last_ts} which is less than the first timestamp {first_ts}")
    if base + rel < base:
        return (f"Corrupt time index found, time index file has non-zero size but the last "
                f"offset is {base + rel} which is less than the first offset {base}")
    return None


def _sanity(path: str, data: bytes, entry_size: int, base: int, out: TextIO,
            problem: Callable[[bytes, int, int], str | None]) -> int:
    """--index-sanity-check: the broker's start-up check of an index, no content printed."""
    if len(data) % entry_size != 0:
        why: str | None = (f"Index file {_name(path)} is corrupt, found {len(data)} bytes "
                           f"which is neither positive nor a multiple of {entry_size}.")
    else:
        entries = len(data) // entry_size
        why = problem(data, entries, base) if entries else None
    if why is not None:
        print(f"Error: {path} failed sanity check: {why}", file=sys.stderr)
        return 1
    print(f"{path} passed sanity check.", file=out)
    return 0


def dump_txn_index(path: str, data: bytes, out: TextIO, err: TextIO) -> int:
    """``version: 0 producerId: ...`` per aborted transaction (dumpTxnIndex)."""
    try:
        entries = decode_txn_index(data, source=path)
    except LogFormatError as exc:
        print(f"Error: {exc}", file=err)
        return 1
    for e in entries:
        print(f"version: 0 producerId: {e.producer_id} firstOffset: {e.first_offset} "
              f"lastOffset: {e.last_offset} lastStableOffset: {e.last_stable_offset}", file=out)
    return 0


# --------------------------------------------------------------------------- entry points

def dump_shared(path: str, data: bytes, opts: DumpOptions, out: TextIO, err: TextIO,
                problems: _Problems) -> int:
    """A shared object (``_wal/*.wal``): each partition's run, as its own segment would
    print, under a line naming the partition, its offsets and where the run lies."""
    from ..segments.shared_object import SharedObjectError, read_footer
    try:
        footer = read_footer(data, source=_name(path))
    except SharedObjectError as exc:
        print(f"Error: {exc}", file=err)
        return 1
    print(f"Shared object written by producer {footer.producer_id} epoch {footer.epoch}: "
          f"{len(footer.entries)} runs", file=out)
    status = 0
    for e in footer.entries:
        print(f"Partition: {e.topic}-{e.partition} baseOffset: {e.base} endOffset: {e.end} "
              f"position: {e.position} size: {e.size}", file=out)
        run = data[e.position:e.position + e.size]
        status = max(status, dump_log(f"{path}#{e.topic}-{e.partition}", run, opts, out, err,
                                      problems))
    return status


def dump_files(paths: list[str], opts: DumpOptions | None = None, *,
               out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Dump each file in turn, then the cross-checks; returns the exit status."""
    opts = opts or DumpOptions()
    out = out or sys.stdout
    err = err or sys.stderr
    problems = _Problems()
    status = 0
    handlers: dict[str, Callable[[str, bytes], int]] = {
        ".log": lambda p, d: dump_log(p, d, opts, out, err, problems),
        ".index": lambda p, d: dump_index(p, d, opts, out, problems),
        ".timeindex": lambda p, d: dump_time_index(p, d, opts, out, problems),
        ".txnindex": lambda p, d: dump_txn_index(p, d, out, err),
        ".wal": lambda p, d: dump_shared(p, d, opts, out, err, problems),
    }
    for path in paths:
        print(f"Dumping {path}", file=out)
        name = _name(path)
        suffix = name[name.rfind("."):] if "." in name else ""
        handler = handlers.get(suffix)
        if handler is None:
            print(f"Ignoring unknown file {path}", file=err)
            continue
        try:
            if suffix != ".wal":  # a shared object is named by its writer, not an offset
                _base_offset(path)
        except ValueError:
            print(f"Error: {name} is not a segment file name: Kafka's log files are named "
                  f"by their base offset in 20 digits, e.g. 00000000000000000000{suffix}",
                  file=err)
            status = 1
            continue
        try:
            data = _read(path)
        except (OSError, ValueError) as exc:
            print(f"Error: cannot read {path}: {exc}", file=err)
            status = 1
            continue
        status = max(status, handler(path, data))
    problems.print(err)
    return status


def _decoded(decoder: Callable[[bytes], str] | None, data: bytes) -> str:
    """``data`` through a user's decoder; one it cannot take prints why, in its place (the
    other records still print)."""
    if decoder is None:
        return _java_string(data)
    try:
        return decoder(bytes(data))
    except Exception as exc:
        return f"<cannot decode: {type(exc).__name__}: {exc}>"


BUILTIN_DECODERS: dict[str, Callable[[bytes], str]] = {
    "string": lambda b: b.decode("utf-8", "replace"),
    "hex": lambda b: b.hex(),
}


def load_decoder(spec: str, options: dict[str, str]) -> Callable[[bytes], str]:
    """A decoder by name: ``string``, ``hex``, or ``module:factory`` (Kafka's decoder class
    name): ``factory(options)`` returns ``decode(bytes) -> str``. Loaded by name at run time
    so the bytes layer names no component above it (the schema registry's is
    ``txnlog.coordinator.schema_registry.dump_decoder:confluent``)."""
    if spec in BUILTIN_DECODERS:
        return BUILTIN_DECODERS[spec]
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"decoder {spec!r}: expected string, hex or module:factory")
    import importlib

    factory = getattr(importlib.import_module(module_name), attr)
    return factory(dict(options))


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--files", dest="files_csv", default=None,
                        help="comma-separated files, as kafka-dump-log takes them")
    parser.add_argument("--deep-iteration", action="store_true",
                        help="print every record, not only batch headers")
    parser.add_argument("--print-data-log", action="store_true",
                        help="print keys and payloads (implies --deep-iteration)")
    parser.add_argument("--skip-record-metadata", action="store_true",
                        help="omit offset/timestamp/size details of each record")
    parser.add_argument("--max-bytes", type=int, default=INT_MAX,
                        help="read at most this many bytes of each .log")
    parser.add_argument("--offsets-decoder", action="store_true",
                        help="decode __consumer_offsets records (implies --print-data-log)")
    parser.add_argument("--transaction-log-decoder", action="store_true",
                        help="decode __transaction_state records, txnlog's own kinds "
                        "included (implies --print-data-log)")
    parser.add_argument("--key-decoder", default=None, metavar="SPEC",
                        help="print keys through a decoder: string, hex or module:factory "
                             "(implies --print-data-log)")
    parser.add_argument("--value-decoder", default=None, metavar="SPEC",
                        help="print payloads through a decoder: string, hex or module:factory, "
                             "e.g. txnlog.coordinator.schema_registry.dump_decoder:confluent "
                             "(implies --print-data-log)")
    parser.add_argument("--decoder-option", action="append", default=[], metavar="K=V",
                        help="an option for the decoders' factories (e.g. root=URL)")
    parser.add_argument("--index-sanity-check", action="store_true",
                        help="only run the broker's start-up check of each index")
    parser.add_argument("--verify-index-only", action="store_true",
                        help="check indexes against their log without printing entries")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """kafka-dump-log's options that apply here; files may be given positionally.

    Files and options may be mixed in any order: everything after the first file is
    collected and re-parsed in ``run`` (the dispatcher calls plain ``parse_args``).
    """
    _add_options(parser)
    parser.add_argument("files", nargs=argparse.REMAINDER, metavar="FILE",
                        help=".log, .index, .timeindex, .txnindex or shared .wal files "
                             "(paths or URLs)")


def _parse_rest(rest: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="txnlog dump")
    _add_options(parser)
    parser.add_argument("files", nargs="*")
    return parser.parse_intermixed_args(rest)


def run(args: argparse.Namespace) -> int:
    rest = _parse_rest(list(args.files or []))
    files = list(rest.files)
    for csv in (args.files_csv, rest.files_csv):
        if csv:
            files += [f for f in csv.split(",") if f]
    if not files:
        print("txnlog dump: no files given", file=sys.stderr)
        return 2
    max_bytes = rest.max_bytes if rest.max_bytes != INT_MAX else args.max_bytes
    flag = lambda name: bool(getattr(args, name) or getattr(rest, name))  # noqa: E731
    if flag("offsets_decoder") and flag("transaction_log_decoder"):
        print("txnlog dump: give one decoder, --offsets-decoder or --transaction-log-decoder",
              file=sys.stderr)
        return 2
    decoder = "offsets" if flag("offsets_decoder") else \
        "transaction-log" if flag("transaction_log_decoder") else None
    decoder_options = {}
    for kv in [*args.decoder_option, *rest.decoder_option]:
        k, sep, v = kv.partition("=")
        if not sep:
            print(f"txnlog dump: --decoder-option {kv!r}: expected K=V", file=sys.stderr)
            return 2
        decoder_options[k] = v
    try:
        key_decoder, value_decoder = (
            load_decoder(spec, decoder_options) if spec else None
            for spec in (args.key_decoder or rest.key_decoder,
                         args.value_decoder or rest.value_decoder))
    except Exception as exc:
        print(f"txnlog dump: {exc}", file=sys.stderr)
        return 2
    if decoder is not None and (key_decoder or value_decoder):
        print("txnlog dump: --key/--value-decoder do not combine with --offsets-decoder or "
              "--transaction-log-decoder", file=sys.stderr)
        return 2
    opts = DumpOptions(deep_iteration=args.deep_iteration or rest.deep_iteration,
                       print_data_log=args.print_data_log or rest.print_data_log
                       or decoder is not None or bool(key_decoder or value_decoder),
                       key_decoder=key_decoder, value_decoder=value_decoder,
                       decoder=decoder, index_sanity_check=flag("index_sanity_check"),
                       verify_index_only=flag("verify_index_only"),
                       skip_record_metadata=args.skip_record_metadata or rest.skip_record_metadata,
                       max_bytes=max_bytes)
    return dump_files(files, opts)
