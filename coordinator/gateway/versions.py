"""What the gateway answers, API by API, and the versions ApiVersions advertises.

Ranges stop where a version would need what a txnlog root does not have: topic ids
(Fetch >= 13, Produce >= 13 name topics by UUID), the KIP-848 consumer protocol, KIP-890's
server-side epoch bump in EndTxn >= 5 and batched AddPartitionsToTxn >= 4 (broker to
broker), share groups. Each range is also cut to what ``kio`` can encode, so a version is
never advertised that the codec would fail on.
"""

from __future__ import annotations

from kio.schema.index import api_key_map, schema_name_map

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
SASL_AUTHENTICATE = 36
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
INCREMENTAL_ALTER_CONFIGS = 44
OFFSET_DELETE = 47
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
DESCRIBE_CLUSTER = 60
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51

WANTED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 9),
    FETCH: (4, 12),
    LIST_OFFSETS: (1, 7),
    METADATA: (0, 12),
    OFFSET_COMMIT: (2, 8),
    OFFSET_FETCH: (1, 7),
    FIND_COORDINATOR: (0, 4),
    JOIN_GROUP: (0, 7),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 4),
    SYNC_GROUP: (0, 5),
    SASL_HANDSHAKE: (0, 1),
    API_VERSIONS: (0, 3),
    INIT_PRODUCER_ID: (0, 4),
    ADD_PARTITIONS_TO_TXN: (0, 3),
    ADD_OFFSETS_TO_TXN: (0, 3),
    END_TXN: (0, 3),
    TXN_OFFSET_COMMIT: (0, 3),
    SASL_AUTHENTICATE: (0, 2),
    # the admin APIs (admin.py); DeleteTopics 6 may name topics by id (UNKNOWN_TOPIC_ID)
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    DELETE_RECORDS: (0, 2),
    CREATE_PARTITIONS: (0, 3),
    DESCRIBE_CONFIGS: (1, 4),
    ALTER_CONFIGS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    LIST_GROUPS: (0, 5),
    DESCRIBE_GROUPS: (0, 6),
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
    DESCRIBE_PRODUCERS: (0, 0),
    DESCRIBE_TRANSACTIONS: (0, 0),
    LIST_TRANSACTIONS: (0, 1),  # v2's id regex would run a client's pattern (ReDoS)
    DESCRIBE_CLUSTER: (0, 1),
    # ACLs and SCRAM credentials (txnlog.coordinator.access)
    DESCRIBE_ACLS: (1, 3),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}


def _supported() -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for key, (lo, hi) in WANTED.items():
        have = schema_name_map[api_key_map[key]]
        versions = [v for v in range(lo, hi + 1) if v in have]
        if versions:
            out[key] = (min(versions), max(versions))
    return out


SUPPORTED: dict[int, tuple[int, int]] = _supported()


def supports(api_key: int, version: int) -> bool:
    rng = SUPPORTED.get(api_key)
    return rng is not None and rng[0] <= version <= rng[1]


__all__ = ["SUPPORTED", "WANTED", "supports"]
