"""Kafka's authorization rules over an index of ACLs (StandardAuthorizer's evaluation).

For a principal, host, operation and resource (type, name):

1. a super user is allowed, even over a DENY;
2. the candidate ACLs are the resource's LITERAL ACLs, the type's LITERAL ``*`` ACLs, and
   the PREFIXED ACLs whose name is a prefix of the resource's name;
3. a matching DENY refuses, whatever ALLOWs match;
4. else a matching ALLOW allows (ALL matches every operation; an ALLOW of READ, WRITE,
   DELETE or ALTER also allows DESCRIBE, of ALTER_CONFIGS also DESCRIBE_CONFIGS);
5. else, when no ACL at all names the resource, ``allow_everyone_if_no_acl_found``
   decides (false by default), and when some do, the request is refused.

A candidate matches when its principal is the request's or ``User:*`` and its host the
client's address or ``*``. Why an index: a check runs for every item of every request, so
it must not scan the ACLs; literal ACLs are found by (type, name) and prefixed ones by
looking up each prefix of the name (at most its length, 249 for a topic), so 10,000 ACLs
cost what 10 do.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from . import audit
from .model import CLUSTER_NAME, WILDCARD, AclBinding, Operation, PatternType, Permission
from .model import ResourceType as RT

IMPLIED_BY_ALLOW = {Operation.DESCRIBE: (Operation.READ, Operation.WRITE, Operation.DELETE,
                                         Operation.ALTER),
                    Operation.DESCRIBE_CONFIGS: (Operation.ALTER_CONFIGS,)}
ANY_PRINCIPAL = "User:*"


class Authorizer:
    """An immutable view of one set of ACLs with Kafka's rules; build a new one when the
    ACLs change (``Authorizer(bindings, ...)``)."""

    def __init__(self, bindings: Iterable[AclBinding], super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.bindings = tuple(sorted(set(bindings)))
        self._literal: dict[tuple[RT, str], list[AclBinding]] = defaultdict(list)
        self._prefixed: dict[tuple[RT, str], list[AclBinding]] = defaultdict(list)
        self._prefix_lengths: dict[RT, set[int]] = defaultdict(set)
        for b in self.bindings:
            if b.pattern is PatternType.LITERAL:
                self._literal[(b.resource_type, b.name)].append(b)
            else:
                self._prefixed[(b.resource_type, b.name)].append(b)
                self._prefix_lengths[b.resource_type].add(len(b.name))

    def candidates(self, rtype: RT, name: str) -> list[AclBinding]:
        """Every ACL naming this resource: literal, literal ``*``, and prefixes of it."""
        out = list(self._literal.get((rtype, name), ()))
        if name != WILDCARD:
            out.extend(self._literal.get((rtype, WILDCARD), ()))
        for n in self._prefix_lengths.get(rtype, ()):
            if n <= len(name):
                out.extend(self._prefixed.get((rtype, name[:n]), ()))
        return out

    def allowed(self, principal: str, host: str, op: Operation, rtype: RT, name: str) -> bool:
        """Kafka's answer, without logging."""
        if principal in self.super_users:
            return True
        acls = self.candidates(rtype, name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        implied = IMPLIED_BY_ALLOW.get(op, ())
        allow = False
        for b in acls:
            if b.principal != principal and b.principal != ANY_PRINCIPAL:
                continue
            if b.host != WILDCARD and b.host != host:
                continue
            if b.permission is Permission.DENY:
                if b.operation is Operation.ALL or b.operation == op:
                    return False
            elif b.operation is Operation.ALL or b.operation == op or b.operation in implied:
                allow = True
        return allow

    def authorize(self, principal: str, host: str, op: Operation, rtype: RT, name: str
                  ) -> bool:
        """``allowed``, with a refusal written to the audit log."""
        if self.allowed(principal, host, op, rtype, name):
            return True
        audit.refused(principal, host, op.name, f"{rtype.name}:{name}")
        return False

    def cluster(self, principal: str, host: str, op: Operation) -> bool:
        return self.authorize(principal, host, op, RT.CLUSTER, CLUSTER_NAME)

    def any_of_type(self, principal: str, host: str, op: Operation, rtype: RT) -> bool:
        """Kafka's ``authorizeByResourceType``: is ``op`` allowed on at least one resource
        of ``rtype``? (an idempotent producer with WRITE on some topic needs no
        IDEMPOTENT_WRITE on the cluster). An ALLOW counts unless a DENY for the same
        name, a DENY prefix of it, or a literal ``*`` DENY overrides it."""
        if self.allowed(principal, host, op, rtype, "hardcode"):
            return True  # Kafka's first step: super users, and no ACLs under allow-everyone
        mine = [b for b in self.bindings
                if b.resource_type == rtype and b.principal in (principal, ANY_PRINCIPAL)
                and b.host in (WILDCARD, host)
                and (b.operation is Operation.ALL or b.operation == op)]
        denies = [b for b in mine if b.permission is Permission.DENY]
        if any(d.pattern is PatternType.LITERAL and d.name == WILDCARD for d in denies):
            return False
        for a in mine:
            if a.permission is not Permission.ALLOW:
                continue
            if a.pattern is PatternType.LITERAL and a.name == WILDCARD:
                return True
            if not any((d.pattern is PatternType.LITERAL and d.name == a.name and
                        a.pattern is PatternType.LITERAL) or
                       (d.pattern is PatternType.PREFIXED and a.name.startswith(d.name))
                       for d in denies):
                return True
        return False
