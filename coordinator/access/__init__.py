"""txnlog.coordinator.access: principals, credentials and ACLs, as Kafka authorizes them.

Kafka authorizes every request for a principal (``User:name``) on a resource (a topic, a
group, a transactional id, the cluster) with ACLs (KIP-11). This package holds what the
gateway (and any other server of the root) shares to do the same, so the rules live in one
place and the gateway package keeps to its own role:

Modules: ``model`` (resource types, pattern types, operations, permissions and ACL bindings
with Kafka's codes; binding filters), ``authorizer`` (Kafka's evaluation: super users, DENY
wins, implied operations, ``allow.everyone.if.no.acl.found``, an index so thousands of ACLs
cost a few dictionary lookups per check), ``scram`` (SCRAM-SHA-256/512 credentials as
Kafka derives them; PLAIN checked against the same stored keys), ``store`` (ACLs and
credentials kept in the root as a chain of put-if-absent snapshots), ``audit`` (the audit
log: refusals and changes, never a secret), ``sasl`` (one connection's SASL exchange:
PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), ``kafka_acls`` (Kafka's CreateAcls, DescribeAcls,
DeleteAcls, AlterUserScramCredentials and DescribeUserScramCredentials over the store),
``kafka_authz`` (which operation on which resource every Kafka API needs, and the answer a
refused request gets), ``coordinator_authz`` (the coordinator HTTP API's principals:
bearer tokens bound to principals, and what each operation needs).
"""
