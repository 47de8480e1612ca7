"""The log-maintenance jobs: Kafka's log manager's background work, as coordinator roles.

Each job reads the state, plans its work as records in the coordinator's log (so a restarted
coordinator finishes it with the same bytes) and does the storage work; what its records do
to the state is in ``txnlog.coordinator.state``.

- ``merge_policy``: which small objects to merge next, under Kafka's segment rules
- ``log_merger``: merging small objects into Kafka segments, deleting what was merged
- ``merge_worker``: a merge's storage work, in a process of its own on remote storage
- ``log_cleaner``: compacting ``cleanup.policy=compact`` topics (Kafka's LogCleaner)
- ``log_retention``: retention and DeleteRecords: moving a partition's log start offset,
  deleting whole segments
- ``topic_admin``: DeleteRecords and IncrementalAlterConfigs as logged operations
"""
