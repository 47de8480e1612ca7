"""Consumer groups: Kafka's ``coordinator/group``.

- ``group_membership``: the classic group protocol (join, sync, heartbeat, leave), in memory
- ``group_offsets``: offsets committed inside a transaction (TxnOffsetCommit)
"""
