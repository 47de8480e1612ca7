"""``txnlog acls`` (kafka-acls' flags) and ``txnlog scram-credentials``: the root's ACLs
and SCRAM users, changed straight in the root.

Why straight in the root: whoever may run these holds the root's storage credentials,
which already outrank every ACL (a storage holder reads and writes objects directly), so
asking a gateway would guard nothing; and the first user and the first ACL must be
creatable before any principal exists. Gateways see a change within their refresh time
(one second by default). Every change goes to the audit log as ``Local:<os user>``.

Passwords are never flags (they would show in ``ps`` and shell history): they come from
``TXNLOG_SCRAM_PASSWORD`` or standard input, and are never printed.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from typing import Any

from ..access import audit
from ..access.model import (
    CLUSTER_NAME,
    AclBinding,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    parse_enum,
    parse_principal,
)
from ..access.scram import (
    DEFAULT_ITERATIONS,
    HASHES,
    CredentialError,
    ScramCredential,
    check_user,
)
from ..access.store import AccessStore, StoreError

PASSWORD_ENV = "TXNLOG_SCRAM_PASSWORD"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", required=True, help="the txnlog root URL")
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    if parser.prog.endswith("principal-tokens"):
        _common(parser)
        act = parser.add_mutually_exclusive_group(required=True)
        act.add_argument("--add", action="store_true",
                         help="make a new token for --principal, written to --token-file")
        act.add_argument("--remove", action="store_true",
                         help="forget every token of --principal")
        act.add_argument("--list", action="store_true")
        parser.add_argument("--principal")
        parser.add_argument("--token-file", help="--add: where the new token goes (mode "
                                                 "600; must not exist)")
        return
    if parser.prog.endswith("scram-credentials"):
        _common(parser)
        act = parser.add_mutually_exclusive_group(required=True)
        act.add_argument("--add", action="store_true",
                         help=f"set a user's credential (password from ${PASSWORD_ENV} "
                              "or standard input)")
        act.add_argument("--delete", action="store_true")
        act.add_argument("--list", action="store_true")
        parser.add_argument("--user")
        parser.add_argument("--mechanism", action="append", choices=sorted(HASHES),
                            help="repeatable (default: both SCRAM mechanisms)")
        parser.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS)
        return
    _common(parser)
    act = parser.add_mutually_exclusive_group(required=True)
    act.add_argument("--add", action="store_true")
    act.add_argument("--remove", action="store_true")
    act.add_argument("--list", action="store_true")
    for flag in ("--allow-principal", "--deny-principal", "--allow-host", "--deny-host",
                 "--operation", "--topic", "--group", "--transactional-id"):
        parser.add_argument(flag, action="append", default=[])
    parser.add_argument("--principal", default=None, help="--list: only this principal's")
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--resource-pattern-type", default="literal",
                        choices=["literal", "prefixed", "any", "match"])
    parser.add_argument("--producer", action="store_true",
                        help="WRITE, DESCRIBE, CREATE on --topic; WRITE, DESCRIBE on "
                             "--transactional-id")
    parser.add_argument("--consumer", action="store_true",
                        help="READ, DESCRIBE on --topic; READ on --group")
    parser.add_argument("--idempotent", action="store_true",
                        help="with --producer: IDEMPOTENT_WRITE on the cluster")
    parser.add_argument("--force", action="store_true", help="accepted for kafka-acls' sake")


def _store(args: argparse.Namespace) -> AccessStore:
    from txnlog.log_format.storage import Storage

    options = dict(kv.split("=", 1) for kv in args.storage_option if "=" in kv)
    return AccessStore(Storage.for_url(args.root, options or None), refresh_s=0.0)


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, x) for x in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    """kafka-acls' expansion: principals x hosts x operations x resources."""
    pattern = args.resource_pattern_type.upper()
    if pattern not in ("LITERAL", "PREFIXED"):
        raise AclError("--add takes --resource-pattern-type literal or prefixed")
    if args.producer or args.consumer:
        if args.operation or args.deny_principal:
            raise AclError("--producer/--consumer go without --operation and deny options")
        if not args.topic:
            raise AclError("--producer/--consumer need --topic")
        if args.consumer and not args.group:
            raise AclError("--consumer needs --group")
        wanted: list[tuple[ResourceType, str, Operation]] = []
        if args.producer:
            wanted += [(ResourceType.TOPIC, t, op) for t in args.topic
                       for op in (Operation.WRITE, Operation.DESCRIBE, Operation.CREATE)]
            wanted += [(ResourceType.TRANSACTIONAL_ID, x, op) for x in args.transactional_id
                       for op in (Operation.WRITE, Operation.DESCRIBE)]
            if args.idempotent:
                wanted.append((ResourceType.CLUSTER, CLUSTER_NAME, Operation.IDEMPOTENT_WRITE))
        if args.consumer:
            wanted += [(ResourceType.TOPIC, t, op) for t in args.topic
                       for op in (Operation.READ, Operation.DESCRIBE)]
            wanted += [(ResourceType.GROUP, g, Operation.READ) for g in args.group]
    else:
        resources = _resources(args)
        if not resources:
            raise AclError("name a resource: --topic, --group, --transactional-id or --cluster")
        ops = [parse_enum(Operation, o, "operation") for o in args.operation] or [Operation.ALL]
        wanted = [(rt, name, op) for rt, name in resources for op in ops]
    grants = [(p, Permission.ALLOW, args.allow_host or ["*"]) for p in args.allow_principal]
    grants += [(p, Permission.DENY, args.deny_host or ["*"]) for p in args.deny_principal]
    if not grants:
        raise AclError("name a principal: --allow-principal or --deny-principal")
    out = []
    for principal, perm, hosts in grants:
        for host in hosts:
            for rt, name, op in wanted:
                pt = pattern if rt is not ResourceType.CLUSTER else "LITERAL"
                out.append(AclBinding.new(rt, name, pt, principal, host, op, perm))
    return out


def _filters(args: argparse.Namespace) -> list[AclFilter]:
    pattern = parse_enum(PatternType, args.resource_pattern_type, "pattern type")
    resources = _resources(args) or [(ResourceType.ANY, None)]
    principals = (args.allow_principal + args.deny_principal) or [args.principal]
    ops = args.operation or [Operation.ANY]
    perm = Permission.ALLOW if args.allow_principal and not args.deny_principal else \
        Permission.DENY if args.deny_principal and not args.allow_principal else Permission.ANY
    return [AclFilter.new(rt, name, pattern, p, None, op, perm)
            for rt, name in resources for p in principals for op in ops]


def _who() -> str:
    try:
        return f"Local:{getpass.getuser()}"
    except Exception:
        return "Local:unknown"


def _print_acls(acls: list[AclBinding], as_json: bool) -> None:
    if as_json:
        print(json.dumps([b.to_json() for b in acls], indent=2))
        return
    for b in acls:
        print(f"{b.resource_type.name}:{b.pattern.name}:{b.name}\t{b.principal}\t"
              f"{b.permission.name}\t{b.operation.name}\thost={b.host}")


def _password() -> str:
    pw = os.environ.get(PASSWORD_ENV)
    if pw is None:
        pw = getpass.getpass("password: ") if sys.stdin.isatty() else sys.stdin.readline()
        pw = pw.rstrip("\r\n")
    if not pw:
        raise CredentialError(f"no password: set ${PASSWORD_ENV} or give it on standard input")
    return pw


def _scram(args: argparse.Namespace, store: AccessStore) -> int:
    mechs = args.mechanism or sorted(HASHES)
    if args.list:
        users = store.state().users
        rows: dict[str, Any] = {u: {m: c.iterations for m, c in creds.items()}
                                for u, creds in sorted(users.items())
                                if args.user is None or u == args.user}
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for u, creds in rows.items():
                print(u + "\t" + ", ".join(f"{m} iterations={i}" for m, i in creds.items()))
        return 0
    user = check_user(args.user)
    if args.add:
        pw = _password()
        creds = {(user, m): ScramCredential.from_password(m, pw, args.iterations) for m in mechs}
        store.alter_credentials(creds, set())
        for m in mechs:
            audit.changed(_who(), "local", "UPSERT_SCRAM", f"user={user} mechanism={m}")
        print(f"credentials set for {user}: {', '.join(mechs)}")
    else:
        store.alter_credentials({}, {(user, m) for m in mechs})
        for m in mechs:
            audit.changed(_who(), "local", "DELETE_SCRAM", f"user={user} mechanism={m}")
        print(f"credentials deleted for {user}: {', '.join(mechs)}")
    return 0


def _tokens(args: argparse.Namespace, store: AccessStore) -> int:
    import secrets
    from collections import Counter

    if args.list:
        counts = Counter(store.state().tokens.values())
        for principal, n in sorted(counts.items()):
            print(f"{principal}\t{n} token(s)")
        return 0
    principal = parse_principal(args.principal)
    if args.remove:
        n = store.remove_tokens(principal)
        audit.changed(_who(), "local", "DELETE_TOKENS", f"principal={principal} count={n}")
        print(f"removed {n} token(s) of {principal}")
        return 0
    if not args.token_file:
        raise CredentialError("--add needs --token-file (the token is never printed)")
    token = secrets.token_urlsafe(32)
    fd = os.open(args.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    store.add_token(principal, token.encode())
    audit.changed(_who(), "local", "CREATE_TOKEN", f"principal={principal}")
    print(f"a token for {principal} is in {args.token_file} (give it to the job as "
          "TXNLOG_COORDINATOR_TOKEN or the coordinator.token option)")
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        store = _store(args)
        if hasattr(args, "token_file"):
            return _tokens(args, store)
        if hasattr(args, "delete"):
            return _scram(args, store)
        if args.add:
            bindings = _bindings(args)
            store.add_acls(bindings)
            for b in bindings:
                audit.changed(_who(), "local", "CREATE_ACL", str(b))
            print(f"added {len(bindings)} ACL(s)")
            _print_acls(bindings, args.json)
        elif args.remove:
            filters = _filters(args)
            gone = store.remove_acls(lambda b: any(f.matches(b) for f in filters))
            for b in gone:
                audit.changed(_who(), "local", "DELETE_ACL", str(b))
            print(f"removed {len(gone)} ACL(s)")
            _print_acls(gone, args.json)
        else:
            filters = _filters(args)
            _print_acls(sorted(b for b in store.state().acls
                               if any(f.matches(b) for f in filters)), args.json)
        return 0
    except (AclError, CredentialError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (StoreError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
