"""``txnlog topics|groups|transactions|configs|get-offsets|delete-records``: Kafka's admin tools.

Each subcommand is the Kafka tool of the same job with its verbs and flags where they fit
(``kafka-topics``, ``kafka-consumer-groups``, ``kafka-transactions``, ``kafka-configs``,
``kafka-get-offsets``, ``kafka-delete-records``); where Kafka takes ``--bootstrap-server``,
txnlog takes ``--root`` (the log's URL) and, optionally, ``--coordinator``. Every command
prints a table like Kafka's, or with ``--json`` exactly what ``admin.AdminClient`` returned.

Exit codes: 0 done, 1 the operation failed (message on stderr, no traceback), 2 bad usage
(argparse), 3 not supported (yet) by txnlog — the message says why and what instead.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from txnlog.log_format.layout import TopicPartition

from ..client.admin_client import OFFSET_SPECS, AdminClient, UnsupportedOperationError

EXIT_ERROR, EXIT_UNSUPPORTED = 1, 3
COMMANDS = ("topics", "groups", "transactions", "configs", "get-offsets", "delete-records")


# ------------------------------------------------------------------------- output
def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns left-aligned and padded to their widest cell, as Kafka's tools print."""
    cells = [[str(h) for h in headers]] + [["-" if v is None else str(v) for v in r]
                                           for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(" ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in cells)


def _emit(args: argparse.Namespace, data: Any, human: Callable[[], str]) -> None:
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        text = human()
        if text:
            print(text)


# -------------------------------------------------------------------- arguments
def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", required=True,
                   help="the txnlog root (fsspec URL: file:///..., s3://bucket/prefix)")
    p.add_argument("--coordinator", default=None,
                   help="coordinator endpoint (default: the one registered for the root)")
    p.add_argument("--storage-option", action="append", default=[], type=_kv,
                   metavar="KEY=VALUE",
                   help="an fsspec storage option (repeatable)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _kv(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected partition numbers like 0,1,2, got "
                                         f"{text!r}") from None


def _offset_time(text: str) -> int | str:
    """kafka-get-offsets --time: -1/latest, -2/earliest, -3/max-timestamp or epoch ms."""
    low = text.strip().lower()
    if low in OFFSET_SPECS:
        return low
    try:
        value = int(low)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--time must be -1/latest, -2/earliest, -3/max-timestamp or a timestamp in ms, "
            f"not {text!r}") from None
    if value < -3:
        raise argparse.ArgumentTypeError(f"--time {value}: not a timestamp nor -1/-2/-3")
    return value


def _datetime_ms(text: str) -> int:
    """--to-datetime: Kafka's 'YYYY-MM-DDTHH:mm:SS.sss' with optional zone (local if none)."""
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--to-datetime {text!r}: expected e.g. 2026-01-31T12:00:00.000 or "
            "2026-01-31T12:00:00Z") from None
    return int(dt.timestamp() * 1000)


_DURATION = re.compile(r"^-?P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def _duration_ms(text: str) -> int:
    """--by-duration: ISO-8601 'PnDTnHnMnS' (as Kafka's), how far back from now."""
    m = _DURATION.match(text.strip().upper())
    if not m or text.strip().upper() in ("P", "PT"):
        raise argparse.ArgumentTypeError(f"--by-duration {text!r}: expected e.g. PT15M, P1DT2H")
    d, h, mi, s = (float(x) if x else 0.0 for x in m.groups())
    return int(((d * 24 + h) * 60 + mi) * 60_000 + s * 1000)


def _add_topics(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="verb", required=True)
    ls = sub.add_parser("list", help="topic names (kafka-topics --list)")
    ls.add_argument("--exclude-internal", action="store_true",
                    help="leave out __consumer_offsets and other internal topics")
    d = sub.add_parser("describe", help="partitions and offsets (kafka-topics --describe)")
    d.add_argument("--topic", action="append",
                   help="topic name or regex (repeatable; default: all)")
    d.add_argument("--exclude-internal", action="store_true")
    c = sub.add_parser("create", help="create a topic (kafka-topics --create)")
    c.add_argument("--topic", required=True)
    c.add_argument("--partitions", type=int, default=1)
    c.add_argument("--config", action="append", type=_kv, default=[], metavar="KEY=VALUE")
    c.add_argument("--if-not-exists", action="store_true")
    c.add_argument("--replication-factor", type=int, default=None,
                   help="accepted for Kafka scripts; storage replicates, not txnlog")
    rm = sub.add_parser("delete", help="delete a topic (kafka-topics --delete)")
    rm.add_argument("--topic", required=True)
    a = sub.add_parser("alter", help="add partitions (kafka-topics --alter --partitions)")
    a.add_argument("--topic", required=True)
    a.add_argument("--partitions", type=int, required=True)
    for s in (ls, d, c, rm, a):
        _common(s)


def _add_groups(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="verb", required=True)
    ls = sub.add_parser("list", help="consumer groups (kafka-consumer-groups --list)")
    d = sub.add_parser("describe", help="offsets and lag per partition")
    who = d.add_mutually_exclusive_group(required=True)
    who.add_argument("--group", action="append")
    who.add_argument("--all-groups", action="store_true")
    r = sub.add_parser("reset-offsets", help="move a group's offsets (dry run by default)")
    r.add_argument("--group", required=True)
    scope = r.add_mutually_exclusive_group()  # required unless --from-file (checked later)
    scope.add_argument("--topic", action="append",
                       help="TOPIC or TOPIC:0,1 (repeatable), as Kafka's --topic")
    scope.add_argument("--all-topics", action="store_true",
                       help="every partition the group has offsets in")
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-current", action="store_true")
    to.add_argument("--to-offset", type=int)
    to.add_argument("--to-datetime", type=_datetime_ms)
    to.add_argument("--by-duration", type=_duration_ms)
    to.add_argument("--shift-by", type=int)
    to.add_argument("--from-file", metavar="CSV",
                    help="topic,partition,offset lines (or group,topic,partition,offset), as "
                    "--export writes them")
    r.add_argument("--export", action="store_true",
                   help="print the new offsets as CSV (for --from-file) instead of a table")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only show (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    rm = sub.add_parser("delete", help="delete groups' committed offsets")
    rm.add_argument("--group", action="append", required=True)
    do = sub.add_parser("delete-offsets", help="delete a group's offsets of some partitions "
                        "(kafka-consumer-groups --delete-offsets)")
    do.add_argument("--group", required=True)
    do.add_argument("--topic", action="append", required=True,
                    help="TOPIC or TOPIC:0,1 (repeatable)")
    for s in (ls, d, r, rm, do):
        _common(s)


def _add_transactions(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="verb", required=True)
    ls = sub.add_parser("list", help="transactional ids and states (kafka-transactions list)")
    ls.add_argument("--state", action="append", default=[],
                    help="only these states (Ongoing, PrepareCommit, CompleteCommit, ...)")
    ls.add_argument("--producer-id", action="append", type=int, default=[])
    ls.add_argument("--duration-filter", type=int, default=None, metavar="MS",
                    help="only transactions open at least this long (KIP-994)")
    d = sub.add_parser("describe", help="one transactional id")
    d.add_argument("--transactional-id", required=True)
    dp = sub.add_parser("describe-producers", help="producers with state in a partition")
    dp.add_argument("--topic", required=True)
    dp.add_argument("--partition", type=int, required=True)
    fh = sub.add_parser("find-hanging", help="open transactions past the maximum timeout")
    fh.add_argument("--topic", default=None)
    fh.add_argument("--partition", type=int, default=None)
    fh.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                    help="Kafka's default: 15 minutes")
    ab = sub.add_parser("abort", help="abort an Ongoing transaction (fences its producer)")
    ab.add_argument("--transactional-id", default=None)
    ab.add_argument("--topic", default=None)
    ab.add_argument("--partition", type=int, default=None)
    ab.add_argument("--start-offset", type=int, default=None)
    for s in (ls, d, dp, fh, ab):
        _common(s)


def _add_configs(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="verb", required=True)
    d = sub.add_parser("describe", help="a topic's configs (kafka-configs --describe)")
    a = sub.add_parser("alter", help="change configs (kafka-configs --alter)")
    a.add_argument("--add-config", default=None, metavar="K1=V1,K2=V2")
    a.add_argument("--delete-config", default=None, metavar="K1,K2")
    for s in (d, a):
        s.add_argument("--entity-type", default="topics", choices=["topics"])
        who = s.add_mutually_exclusive_group(required=True)
        who.add_argument("--entity-name")
        who.add_argument("--topic")
        _common(s)


def _add_get_offsets(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", default=None, help="a topic name or regex (default: all)")
    p.add_argument("--partitions", type=_int_list, default=None, metavar="0,1,...")
    p.add_argument("--time", type=_offset_time, default="latest",
                   help="-1/latest (default), -2/earliest, -3/max-timestamp or epoch ms")
    p.add_argument("--isolation", choices=["read_committed", "read_uncommitted"],
                   default="read_committed")
    p.add_argument("--exclude-internal-topics", action="store_true")
    _common(p)


def _add_delete_records(p: argparse.ArgumentParser) -> None:
    p.add_argument("--offset-json-file", required=True,
                   help='{"partitions":[{"topic":"t","partition":0,"offset":10}],"version":1}')
    _common(p)


ADDERS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "topics": _add_topics, "groups": _add_groups, "transactions": _add_transactions,
    "configs": _add_configs, "get-offsets": _add_get_offsets,
    "delete-records": _add_delete_records,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of the subcommand this parser is for (its name ends ``parser.prog``)."""
    ADDERS[parser.prog.split()[-1]](parser)


# ------------------------------------------------------------------------ commands
def _admin(args: argparse.Namespace) -> AdminClient:
    return AdminClient(args.root, coordinator=args.coordinator,
                       storage_options=dict(args.storage_option))


def _topics(args: argparse.Namespace, admin: AdminClient) -> None:
    if args.verb == "list":
        names = admin.list_topics(include_internal=not args.exclude_internal)
        _emit(args, names, lambda: "\n".join(names))
    elif args.verb == "describe":
        names = admin.list_topics(include_internal=not args.exclude_internal)
        if args.topic:
            names = _matching(args.topic, admin.list_topics(include_internal=True), args.root)
        desc = admin.describe_topics(names)

        def human() -> str:
            lines = []
            for t in desc:
                cfg = ",".join(f"{k}={v}" for k, v in sorted(t["config"].items()))
                lines.append(f"Topic: {t['name']}\tPartitionCount: {t['partitions']}\t"
                             f"Configs: {cfg}")
                lines += [f"\tTopic: {t['name']}\tPartition: {o['partition']}\t"
                          f"LogStartOffset: {o['log_start_offset']}\t"
                          f"HighWatermark: {o['high_watermark']}\t"
                          f"LastStableOffset: {o['last_stable_offset']}"
                          for o in t["offsets"]]
            return "\n".join(lines)
        _emit(args, desc, human)
    elif args.verb == "create":
        if args.replication_factor not in (None, 1):
            print(f"Note: --replication-factor {args.replication_factor} ignored: the "
                  "storage under the root replicates, not txnlog", file=sys.stderr)
        [meta] = admin.create_topics([(args.topic, args.partitions, dict(args.config))],
                                     exist_ok=args.if_not_exists)
        _emit(args, meta, lambda: f"Created topic {args.topic}.")
    elif args.verb == "delete":
        admin.delete_topics([args.topic])
        _emit(args, {"deleted": args.topic}, lambda: f"Topic {args.topic} deleted.")
    else:
        admin.create_partitions(args.topic, args.partitions)
        _emit(args, {"name": args.topic, "partitions": args.partitions},
              lambda: f"Topic {args.topic} now has {args.partitions} partitions.")


def _matching(patterns: list[str], names: list[str], root: str) -> list[str]:
    """Topics named, or matched by a regex (Kafka's --topic accepts both); a pattern that
    matches nothing is an error, as in kafka-topics."""
    from txnlog.log_format.topics import UnknownTopicError

    out: list[str] = []
    for pattern in patterns:
        try:
            rx = re.compile(pattern)
        except re.error:
            rx = None
        hits = [n for n in names if n == pattern or (rx is not None and rx.fullmatch(n))]
        if not hits:
            raise UnknownTopicError(f"topic {pattern!r} does not exist under {root}")
        out += [n for n in hits if n not in out]
    return out


def _group_rows(desc: list[dict[str, Any]]) -> str:
    out = []
    for g in desc:
        if not g["offsets"]:
            out.append(f"Consumer group '{g['group_id']}' has no committed offsets.")
            continue
        rows = [(g["group_id"], o["topic"], o["partition"], o["current_offset"],
                 o["log_end_offset"], o["lag"], "-", "-", "-") for o in g["offsets"]]
        out.append(table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                          "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"], rows))
    return "\n\n".join(out)


def _reset_targets(args: argparse.Namespace, admin: AdminClient) -> dict[Any, int]:
    """The new offset of every partition in scope, clamped to [earliest, latest] as
    Kafka's reset does."""
    current = admin.list_consumer_group_offsets(args.group)
    from_file = _offsets_file(args.from_file, args.group) if args.from_file else None
    if from_file is not None and not args.topic and not args.all_topics:
        scope = sorted(from_file)
    elif not args.topic and not args.all_topics:
        raise argparse.ArgumentTypeError("one of the arguments --topic --all-topics is "
                                         "required")
    elif args.all_topics:
        scope = sorted(current)
        if not scope:
            raise ValueError(f"group {args.group!r} has no committed offsets; name --topic")
    else:
        scope = []
        for spec in args.topic:
            topic, _, parts = spec.partition(":")
            scope += admin.partitions_of(topic, _int_list(parts) if parts else None)
    earliest = {tp: r["offset"] for tp, r in admin.list_offsets(
        dict.fromkeys(scope, "earliest")).items()}
    latest = {tp: r["offset"] for tp, r in admin.list_offsets(
        dict.fromkeys(scope, "latest")).items()}
    if args.to_datetime is not None or args.by_duration is not None:
        import time

        ts = args.to_datetime if args.to_datetime is not None else \
            int(time.time() * 1000) - args.by_duration
        by_time = admin.list_offsets(dict.fromkeys(scope, ts))
    out = {}
    for tp in scope:
        cur = current.get(tp, earliest[tp])
        if args.to_earliest:
            want = earliest[tp]
        elif args.to_latest:
            want = latest[tp]
        elif args.to_current:
            want = cur
        elif args.to_offset is not None:
            want = args.to_offset
        elif args.shift_by is not None:
            want = cur + args.shift_by
        elif from_file is not None:
            if tp not in from_file:
                continue
            want = from_file[tp]
        else:
            found = by_time[tp]["offset"]
            want = latest[tp] if found < 0 else found
        out[tp] = min(max(want, earliest[tp]), latest[tp])
    return out


def _offsets_file(path: str, group: str) -> dict[TopicPartition, int]:
    """Kafka's reset CSV: ``topic,partition,offset`` or ``group,topic,partition,offset``
    (lines of other groups are skipped)."""
    out: dict[TopicPartition, int] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                cells = [c.strip() for c in line.strip().split(",")]
                if cells == [""]:
                    continue
                if len(cells) == 4:
                    if cells[0] != group:
                        continue
                    cells = cells[1:]
                if len(cells) != 3:
                    raise ValueError(f"line {n}: expected topic,partition,offset")
                out[TopicPartition(cells[0], int(cells[1]))] = int(cells[2])
    except (OSError, ValueError) as exc:
        raise ValueError(f"--from-file {path}: {exc}") from None
    return out


def _groups(args: argparse.Namespace, admin: AdminClient) -> None:
    if args.verb == "list":
        groups = admin.list_consumer_groups()
        _emit(args, groups, lambda: "\n".join(g["group_id"] for g in groups))
    elif args.verb == "describe":
        ids = args.group or [g["group_id"] for g in admin.list_consumer_groups()]
        desc = admin.describe_consumer_groups(ids)
        _emit(args, desc, lambda: _group_rows(desc))
    elif args.verb == "reset-offsets":
        targets = _reset_targets(args, admin)
        if args.execute:
            admin.alter_consumer_group_offsets(args.group, targets)
        rows = [{"group_id": args.group, "topic": t, "partition": p, "new_offset": o}
                for (t, p), o in sorted(targets.items())]
        note = "" if args.execute else \
            "\n(dry run: nothing changed; add --execute to commit these offsets)"
        if args.export and not args.json:
            print("\n".join(f"{r['topic']},{r['partition']},{r['new_offset']}" for r in rows))
            if not args.execute:
                print(note.strip(), file=sys.stderr)
            return
        _emit(args, {"executed": bool(args.execute), "offsets": rows}, lambda: table(
            ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
            [(r["group_id"], r["topic"], r["partition"], r["new_offset"]) for r in rows])
            + note)
    elif args.verb == "delete-offsets":
        parts = []
        for spec in args.topic:
            topic, _, nums = spec.partition(":")
            parts += admin.partitions_of(topic, _int_list(nums) if nums else None)
        deleted = admin.delete_consumer_group_offsets(args.group, parts)
        if not deleted:
            print(f"Error: GroupIdNotFound: group {args.group!r} has no committed offsets in "
                  f"{', '.join(args.topic)}", file=sys.stderr)
            raise _Failed()
        _emit(args, {"group_id": args.group, "deleted": [list(tp) for tp in parts]},
              lambda: table(["TOPIC", "PARTITION", "STATUS"],
                            [(t, p, "Successful") for t, p in parts]))
    else:
        result = admin.delete_consumer_groups(args.group)
        _emit(args, result, lambda: "\n".join(
            f"Deletion of requested consumer groups ('{g}') was successful."
            for g, ok in result.items() if ok))
        missing = [g for g, ok in result.items() if not ok]
        if missing:
            print(f"Error: GroupIdNotFound: group(s) {', '.join(missing)} have no committed "
                  "offsets (nothing to delete)", file=sys.stderr)
            raise _Failed()


def _txn_table(rows: list[dict[str, Any]]) -> str:
    return table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
                 [(r["transactional_id"], r["coordinator_epoch"], r["producer_id"],
                   r["state"]) for r in rows])


def _transactions(args: argparse.Namespace, admin: AdminClient) -> None:
    if args.verb == "list":
        rows = admin.list_transactions(args.state, args.producer_id, args.duration_filter)
        _emit(args, rows, lambda: _txn_table(rows))
    elif args.verb == "describe":
        [r] = admin.describe_transactions([args.transactional_id])
        _emit(args, r, lambda: table(
            ["CoordinatorEpoch", "TransactionalId", "ProducerId", "ProducerEpoch",
             "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
             "TransactionDurationMs", "TopicPartitions"],
            [(r["coordinator_epoch"], r["transactional_id"], r["producer_id"], r["epoch"],
              r["state"], r["timeout_ms"], r["start_ms"] if r["start_ms"] >= 0 else None,
              r["duration_ms"] if r["duration_ms"] >= 0 else None,
              ",".join(r["partitions"]) or None)]))
    elif args.verb == "describe-producers":
        [part] = admin.describe_producers([(args.topic, args.partition)])
        rows = part["producers"]
        _emit(args, part, lambda: table(
            ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
             "LastOffset", "CurrentTransactionStartOffset", "TransactionalId"],
            [(r["producer_id"], r["producer_epoch"], r["coordinator_epoch"],
              r["last_sequence"], r["last_offset"], r["current_txn_start_offset"],
              r["transactional_id"]) for r in rows]))
    elif args.verb == "find-hanging":
        parts = None
        if args.topic is not None:
            parts = admin.partitions_of(args.topic, None if args.partition is None
                                        else [args.partition])
        rows = admin.find_hanging_transactions(parts, args.max_transaction_timeout * 60_000)
        _emit(args, rows, lambda: table(
            ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
             "StartOffset", "LastTimestamp", "Duration(min)", "TransactionalId"],
            [(r["topic"], r["partition"], r["producer_id"], r["producer_epoch"],
              r["coordinator_epoch"], r["start_offset"], r["last_timestamp"],
              r["duration_ms"] // 60_000, r["transactional_id"]) for r in rows]))
    else:
        result = admin.abort_transaction(args.transactional_id, topic=args.topic,
                                         partition=args.partition,
                                         start_offset=args.start_offset)
        _emit(args, result, lambda: f"Aborted the transaction of "
              f"{result['transactional_id']!r} (producer {result['producer_id']} is now at "
              f"epoch {result['epoch']}).")


def _configs(args: argparse.Namespace, admin: AdminClient) -> None:
    topic = args.entity_name or args.topic
    if args.verb == "describe":
        rows = admin.describe_configs(topic)
        _emit(args, rows, lambda: f"All configs for topic {topic} are:\n" + "\n".join(
            f"  {r['name']}={r['value']} sensitive=false synonyms={{{r['source']}:"
            f"{r['name']}={r['value']}}} honoured={str(r['honoured']).lower()}"
            for r in rows))
    else:
        add = dict(_kv(x) for x in (args.add_config or "").split(",") if x.strip())
        drop = [x.strip() for x in (args.delete_config or "").split(",") if x.strip()]
        if not add and not drop:
            raise ValueError("give --add-config and/or --delete-config")
        config = admin.incremental_alter_configs(topic, add, drop)
        _emit(args, config, lambda: f"Completed updating config for topic {topic}.")


def _get_offsets(args: argparse.Namespace, admin: AdminClient) -> None:
    names = admin.list_topics(include_internal=not args.exclude_internal_topics)
    if args.topic is not None:
        pattern = re.compile(args.topic)
        names = [n for n in names if pattern.fullmatch(n)]
        if not names:
            raise ValueError(f"no topic matches {args.topic!r}")
    tps = [tp for n in names for tp in admin.partitions_of(n)
           if args.partitions is None or tp[1] in args.partitions]
    found = admin.list_offsets(dict.fromkeys(tps, args.time), args.isolation)
    rows = [{"topic": t, "partition": p, **r} for (t, p), r in sorted(found.items())]
    # Kafka prints topic:partition:offset, and nothing for a time with no offset.
    _emit(args, rows, lambda: "\n".join(f"{r['topic']}:{r['partition']}:{r['offset']}"
                                        for r in rows if r["offset"] >= 0))


def _delete_records(args: argparse.Namespace, admin: AdminClient) -> None:
    try:
        with open(args.offset_json_file, encoding="utf-8") as f:
            spec = json.load(f)
        before = {(str(x["topic"]), int(x["partition"])): int(x["offset"])
                  for x in spec["partitions"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--offset-json-file {args.offset_json_file}: {exc}") from None
    low = admin.delete_records(before)
    rows = [{"topic": t, "partition": p, "low_watermark": w} for (t, p), w in sorted(low.items())]
    # kafka-delete-records prints one line per partition
    _emit(args, rows, lambda: "Records delete operation completed:\n" + "\n".join(
        f"partition: {r['topic']}-{r['partition']}\tlow_watermark: {r['low_watermark']}"
        for r in rows))


class _Failed(Exception):
    """The command printed its own error; exit 1."""


RUNNERS: dict[str, Callable[[argparse.Namespace, AdminClient], None]] = {
    "topics": _topics, "groups": _groups, "transactions": _transactions,
    "configs": _configs, "get-offsets": _get_offsets, "delete-records": _delete_records,
}


def run(args: argparse.Namespace) -> int:
    """Run one admin command; errors become a message and an exit code, not a traceback."""
    from txnlog.log_format.errors import TxnlogError

    admin = _admin(args)
    try:
        RUNNERS[args.command](args, admin)
    except UnsupportedOperationError as exc:
        print(f"Error: not supported: {exc}", file=sys.stderr)
        return EXIT_UNSUPPORTED
    except _Failed:
        return EXIT_ERROR
    except argparse.ArgumentTypeError as exc:
        print(f"txnlog {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (TxnlogError, ValueError, LookupError, OSError) as exc:
        name = getattr(exc, "name", None) or type(exc).__name__
        print(f"Error: {name}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return 0
