"""Kafka's ACL and SCRAM credential APIs over the root's store.

CreateAcls needs ALTER on the cluster, DescribeAcls DESCRIBE, DeleteAcls ALTER;
DescribeUserScramCredentials DESCRIBE and AlterUserScramCredentials ALTER (refused:
CLUSTER_AUTHORIZATION_FAILED). Without an authorizer (the gateway without ``--sasl``)
the ACL APIs answer SECURITY_DISABLED, as Kafka does. Every change is written to the
audit log with the principal who made it; credentials by user and mechanism only.

Storage calls block, so the gateway runs these functions on its I/O threads.
"""

from __future__ import annotations

from typing import Any

from . import audit
from .authorizer import Authorizer
from .model import AclBinding, AclError, AclFilter, Operation
from .sasl import Subject
from .scram import MECHANISMS, CredentialError, ScramCredential, check_iterations, check_user
from .store import AccessStore, StoreError

NONE = 0
UNKNOWN_SERVER_ERROR = -1
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_SASL_MECHANISM = 33
INVALID_REQUEST = 42
SECURITY_DISABLED = 54
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93
MAX_ITEMS = 10_000


class AclApis:
    """The five APIs for one gateway: its store, its settings, the caller."""

    def __init__(self, store: AccessStore | None, az: Authorizer | None, subject: Subject
                 ) -> None:
        self.store, self.az, self.subject = store, az, subject

    def _allowed(self, op: Operation) -> bool:
        if self.subject.super_user:
            return True
        return self.az is not None and self.az.cluster(self.subject.principal,
                                                       self.subject.host, op)

    def _audit(self, action: str, what: str) -> None:
        audit.changed(self.subject.principal, self.subject.host, action, what)

    # ---- ACLs ------------------------------------------------------------------------
    def create_acls(self, body: Any) -> dict[str, Any]:
        creations = list(body.creations)

        def all_(code: int, msg: str | None) -> dict[str, Any]:
            return {"throttle_time": 0, "results": [{"error_code": code, "error_message": msg}
                                                    for _ in creations]}
        if self.store is None:
            return all_(SECURITY_DISABLED, "no authorizer is configured")
        if not self._allowed(Operation.ALTER):
            return all_(CLUSTER_AUTHORIZATION_FAILED, None)
        if len(creations) > MAX_ITEMS:
            return all_(INVALID_REQUEST, f"at most {MAX_ITEMS} ACLs per request")
        results: list[dict[str, Any]] = []
        good: list[AclBinding] = []
        for c in creations:
            try:
                b = AclBinding.new(int(c.resource_type), c.resource_name,
                                   int(c.resource_pattern_type), c.principal, c.host,
                                   int(c.operation), int(c.permission_type))
            except AclError as exc:
                results.append({"error_code": INVALID_REQUEST, "error_message": str(exc)})
                continue
            good.append(b)
            results.append({"error_code": NONE, "error_message": None})
        if good:
            try:
                self.store.add_acls(good)
            except (StoreError, OSError) as exc:
                return all_(UNKNOWN_SERVER_ERROR, f"ACLs not stored: {exc}")
            for b in good:
                self._audit("CREATE_ACL", str(b))
        return {"throttle_time": 0, "results": results}

    @staticmethod
    def _filter(f: Any) -> AclFilter:
        return AclFilter.new(int(f.resource_type_filter), f.resource_name_filter,
                             int(f.pattern_type_filter), f.principal_filter, f.host_filter,
                             int(f.operation), int(f.permission_type))

    def describe_acls(self, body: Any) -> dict[str, Any]:
        def err(code: int, msg: str | None) -> dict[str, Any]:
            return {"throttle_time": 0, "error_code": code, "error_message": msg,
                    "resources": []}
        if self.store is None:
            return err(SECURITY_DISABLED, "no authorizer is configured")
        if not self._allowed(Operation.DESCRIBE):
            return err(CLUSTER_AUTHORIZATION_FAILED, None)
        try:
            flt = self._filter(body)
            acls = self.store.state().acls
        except AclError as exc:
            return err(INVALID_REQUEST, str(exc))
        except (StoreError, OSError) as exc:
            return err(UNKNOWN_SERVER_ERROR, f"ACLs not read: {exc}")
        groups: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
        for b in sorted(a for a in acls if flt.matches(a)):
            groups.setdefault((int(b.resource_type), b.name, int(b.pattern)), []).append(
                {"principal": b.principal, "host": b.host, "operation": int(b.operation),
                 "permission_type": int(b.permission)})
        return {"throttle_time": 0, "error_code": NONE, "error_message": None,
                "resources": [{"resource_type": t, "resource_name": n, "pattern_type": p,
                               "acls": acls_} for (t, n, p), acls_ in groups.items()]}

    def delete_acls(self, body: Any) -> dict[str, Any]:
        filters = list(body.filters)

        def all_(code: int, msg: str | None) -> dict[str, Any]:
            return {"throttle_time": 0, "filter_results": [
                {"error_code": code, "error_message": msg, "matching_acls": []}
                for _ in filters]}
        if self.store is None:
            return all_(SECURITY_DISABLED, "no authorizer is configured")
        if not self._allowed(Operation.ALTER):
            return all_(CLUSTER_AUTHORIZATION_FAILED, None)
        if len(filters) > MAX_ITEMS:
            return all_(INVALID_REQUEST, f"at most {MAX_ITEMS} filters per request")
        parsed: list[AclFilter | str] = []
        for f in filters:
            try:
                parsed.append(self._filter(f))
            except AclError as exc:
                parsed.append(str(exc))
        good = [f for f in parsed if isinstance(f, AclFilter)]
        try:
            gone = self.store.remove_acls(lambda b: any(f.matches(b) for f in good)) \
                if good else []
        except (StoreError, OSError) as exc:
            return all_(UNKNOWN_SERVER_ERROR, f"ACLs not deleted: {exc}")
        for b in gone:
            self._audit("DELETE_ACL", str(b))
        results = []
        for f in parsed:
            if isinstance(f, str):
                results.append({"error_code": INVALID_REQUEST, "error_message": f,
                                "matching_acls": []})
                continue
            results.append({"error_code": NONE, "error_message": None, "matching_acls": [
                {"error_code": NONE, "error_message": None,
                 "resource_type": int(b.resource_type), "resource_name": b.name,
                 "pattern_type": int(b.pattern), "principal": b.principal, "host": b.host,
                 "operation": int(b.operation), "permission_type": int(b.permission)}
                for b in gone if f.matches(b)]})
        return {"throttle_time": 0, "filter_results": results}

    # ---- SCRAM credentials -----------------------------------------------------------
    def describe_scram(self, body: Any) -> dict[str, Any]:
        def err(code: int, msg: str | None) -> dict[str, Any]:
            return {"throttle_time": 0, "error_code": code, "error_message": msg,
                    "results": []}
        if self.store is None:
            return err(SECURITY_DISABLED, "no SCRAM credentials without --sasl")
        if not self._allowed(Operation.DESCRIBE):
            return err(CLUSTER_AUTHORIZATION_FAILED, None)
        try:
            users = self.store.state().users
        except (StoreError, OSError) as exc:
            return err(UNKNOWN_SERVER_ERROR, f"credentials not read: {exc}")
        wanted = sorted(users) if body.users is None else [u.name for u in body.users]
        results = []
        seen: set[str] = set()
        for name in wanted:
            if name in seen:
                results.append({"user": name, "error_code": DUPLICATE_RESOURCE,
                                "error_message": "user named twice", "credential_infos": []})
                continue
            seen.add(name)
            creds = users.get(name)
            if not creds:
                results.append({"user": name, "error_code": RESOURCE_NOT_FOUND,
                                "error_message": "no credentials for this user",
                                "credential_infos": []})
                continue
            codes = {v: k for k, v in MECHANISMS.items()}
            results.append({"user": name, "error_code": NONE, "error_message": None,
                            "credential_infos": [
                                {"mechanism": codes[m], "iterations": c.iterations}
                                for m, c in sorted(creds.items())]})
        return {"throttle_time": 0, "error_code": NONE, "error_message": None,
                "results": results}

    def alter_scram(self, body: Any) -> dict[str, Any]:
        dels, ups = list(body.deletions), list(body.upsertions)
        names = [d.name for d in dels] + [u.name for u in ups]
        order = list(dict.fromkeys(names))

        def all_(code: int, msg: str | None) -> dict[str, Any]:
            return {"throttle_time": 0, "results": [
                {"user": n, "error_code": code, "error_message": msg} for n in order]}
        if self.store is None:
            return all_(SECURITY_DISABLED, "no SCRAM credentials without --sasl")
        if not self._allowed(Operation.ALTER):
            return all_(CLUSTER_AUTHORIZATION_FAILED, None)
        if len(names) > MAX_ITEMS:
            return all_(INVALID_REQUEST, f"at most {MAX_ITEMS} changes per request")
        errors: dict[str, tuple[int, str]] = {}
        counts: dict[tuple[str, int], int] = {}  # Kafka: a (user, mechanism) pair twice
        for x in dels + ups:
            key = (x.name, int(x.mechanism))
            counts[key] = counts.get(key, 0) + 1
        try:
            current = self.store.state(0.0).users
        except (StoreError, OSError) as exc:
            return all_(UNKNOWN_SERVER_ERROR, f"credentials not read: {exc}")
        upserts: dict[tuple[str, str], ScramCredential] = {}
        deletions: set[tuple[str, str]] = set()
        for d in dels:
            err = self._check(d.name, int(d.mechanism), counts)
            if err is None and MECHANISMS[int(d.mechanism)] not in current.get(d.name, {}):
                err = (RESOURCE_NOT_FOUND, "no such credential to delete")
            if err is not None:
                errors.setdefault(d.name, err)
            else:
                deletions.add((d.name, MECHANISMS[int(d.mechanism)]))
        for u in ups:
            err = self._check(u.name, int(u.mechanism), counts)
            if err is None:
                try:
                    check_iterations(int(u.iterations))
                    cred = ScramCredential.from_salted(MECHANISMS[int(u.mechanism)],
                                                       bytes(u.salt), bytes(u.salted_password),
                                                       int(u.iterations))
                    upserts[(u.name, cred.mechanism)] = cred
                except CredentialError as exc:
                    err = (UNACCEPTABLE_CREDENTIAL, str(exc))
            if err is not None:
                errors.setdefault(u.name, err)
        upserts = {k: v for k, v in upserts.items() if k[0] not in errors}
        deletions = {k for k in deletions if k[0] not in errors}
        if upserts or deletions:
            try:
                self.store.alter_credentials(upserts, deletions)
            except (StoreError, OSError) as exc:
                return all_(UNKNOWN_SERVER_ERROR, f"credentials not stored: {exc}")
            for user, mech in sorted(upserts):
                self._audit("UPSERT_SCRAM", f"user={user} mechanism={mech}")
            for user, mech in sorted(deletions):
                self._audit("DELETE_SCRAM", f"user={user} mechanism={mech}")
        return {"throttle_time": 0, "results": [
            {"user": n, "error_code": errors.get(n, (NONE, None))[0],
             "error_message": errors.get(n, (NONE, None))[1]} for n in order]}

    @staticmethod
    def _check(name: str, mechanism: int, counts: dict[tuple[str, int], int]
               ) -> tuple[int, str] | None:
        if counts.get((name, mechanism), 0) > 1:
            return DUPLICATE_RESOURCE, "a user's mechanism may be altered once per request"
        try:
            check_user(name)
        except CredentialError as exc:
            return UNACCEPTABLE_CREDENTIAL, str(exc)
        if mechanism not in MECHANISMS:
            return UNSUPPORTED_SASL_MECHANISM, f"unknown SCRAM mechanism {mechanism}"
        return None
