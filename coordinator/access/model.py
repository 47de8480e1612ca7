"""ACL bindings and filters, with Kafka's names and codes (``ResourceType``, ``PatternType``,
``AclOperation``, ``AclPermissionType``).

Why Kafka's codes verbatim: bindings travel in CreateAcls/DescribeAcls/DeleteAcls as these
integers, and ``kafka-acls`` users know the names; the root stores the names (readable in a
listing). A new binding must be LITERAL or PREFIXED, with a concrete resource type,
operation and permission; ANY and MATCH are for filters only, as in Kafka.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
MAX_NAME = 1024  # longer resource names, principals or hosts are refused, not stored


class AclError(ValueError):
    """A binding or filter Kafka would refuse (INVALID_REQUEST); the message says why."""


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def parse_enum(cls: type[enum.IntEnum], value: object, what: str) -> Any:
    """``value`` (a code, or a name in any case, ``-`` or ``_``) as a member of ``cls``."""
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value)
        if isinstance(value, str):
            key = value.strip().upper().replace("-", "_")
            key = {"CLUSTERACTION": "CLUSTER_ACTION", "DESCRIBECONFIGS": "DESCRIBE_CONFIGS",
                   "ALTERCONFIGS": "ALTER_CONFIGS", "IDEMPOTENTWRITE": "IDEMPOTENT_WRITE",
                   "TRANSACTIONALID": "TRANSACTIONAL_ID", "CREATETOKENS": "CREATE_TOKENS",
                   "DESCRIBETOKENS": "DESCRIBE_TOKENS"}.get(key, key)
            return cls[key]
    except (ValueError, KeyError):
        pass
    raise AclError(f"unknown {what} {value!r}")


def parse_principal(text: object) -> str:
    """``Type:name`` (split at the first colon, as Kafka's SecurityUtils does)."""
    if not isinstance(text, str) or len(text) > MAX_NAME:
        raise AclError(f"a principal is Type:name, got {text!r}")
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise AclError(f"a principal is Type:name (User:alice), got {text!r}")
    return text


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: ``principal`` may (ALLOW) or may not (DENY) do ``operation`` from ``host``
    on the resources ``(resource_type, name, pattern)`` names."""

    resource_type: ResourceType
    name: str
    pattern: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    @classmethod
    def new(cls, resource_type: object, name: object, pattern: object, principal: object,
            host: object, operation: object, permission: object) -> AclBinding:
        """A binding that may be stored; AclError naming the first thing wrong."""
        rt = parse_enum(ResourceType, resource_type, "resource type")
        pt = parse_enum(PatternType, pattern, "pattern type")
        op = parse_enum(Operation, operation, "operation")
        perm = parse_enum(Permission, permission, "permission type")
        if rt in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise AclError("an ACL needs a concrete resource type")
        if pt not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError("an ACL's pattern type is LITERAL or PREFIXED")
        if op in (Operation.UNKNOWN, Operation.ANY):
            raise AclError("an ACL needs a concrete operation")
        if perm not in (Permission.ALLOW, Permission.DENY):
            raise AclError("an ACL's permission is ALLOW or DENY")
        if not isinstance(name, str) or not name or len(name) > MAX_NAME:
            raise AclError(f"an ACL needs a resource name, got {name!r}")
        if rt is ResourceType.CLUSTER and name != CLUSTER_NAME:
            raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}")
        if not isinstance(host, str) or not host or len(host) > MAX_NAME:
            raise AclError(f"an ACL needs a host (* for any), got {host!r}")
        return cls(rt, name, pt, parse_principal(principal), host, op, perm)

    def to_json(self) -> dict[str, str]:
        return {"resource_type": self.resource_type.name, "name": self.name,
                "pattern": self.pattern.name, "principal": self.principal,
                "host": self.host, "operation": self.operation.name,
                "permission": self.permission.name}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AclBinding:
        return cls.new(d["resource_type"], d["name"], d["pattern"], d["principal"],
                       d["host"], d["operation"], d["permission"])

    def __str__(self) -> str:
        return (f"{self.principal} {self.permission.name} {self.operation.name} from "
                f"{self.host} on {self.resource_type.name}:{self.pattern.name}:{self.name}")


@dataclass(frozen=True)
class AclFilter:
    """Which bindings a DescribeAcls or DeleteAcls names (None: any)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    @classmethod
    def new(cls, resource_type: object = 1, name: str | None = None, pattern: object = 1,
            principal: str | None = None, host: str | None = None, operation: object = 1,
            permission: object = 1) -> AclFilter:
        f = cls(parse_enum(ResourceType, resource_type, "resource type"), name,
                parse_enum(PatternType, pattern, "pattern type"), principal, host,
                parse_enum(Operation, operation, "operation"),
                parse_enum(Permission, permission, "permission type"))
        if ResourceType.UNKNOWN in (f.resource_type,) or f.pattern is PatternType.UNKNOWN \
                or f.operation is Operation.UNKNOWN or f.permission is Permission.UNKNOWN:
            raise AclError("a filter may not hold UNKNOWN")
        return f

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if self.operation is not Operation.ANY and b.operation != self.operation:
            return False
        if self.permission is not Permission.ANY and b.permission != self.permission:
            return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        return self._pattern_matches(b)

    def _pattern_matches(self, b: AclBinding) -> bool:
        # Kafka's ResourcePatternFilter: MATCH = every binding that affects the name
        if self.pattern is PatternType.MATCH:
            if self.name is None:
                return True
            if b.pattern is PatternType.LITERAL:
                return b.name in (self.name, WILDCARD)
            return self.name.startswith(b.name)
        if self.pattern is not PatternType.ANY and b.pattern != self.pattern:
            return False
        return self.name is None or b.name == self.name
