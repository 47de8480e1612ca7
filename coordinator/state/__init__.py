"""The coordinator's own log and the state it rebuilds: Kafka's TransactionStateManager.

Every change of the coordinator's state is one record of ``__transaction_state-0``, and what
a record does to the state lives here, in ``apply`` and the ``apply_*`` functions it calls;
the jobs in ``maintenance`` only read the state and commit records.

- ``coordinator_state``: ``CoordinatorState`` and ``apply(record)``, the one function that
  changes it
- ``txn_log``: the log itself: durable, group-committed, fenced appends
- ``txn_log_records``: the records (Kafka's TransactionLogKey/Value plus our own)
- ``runtime``: what the roles share at run time: the commit step, storage I/O, metrics
- ``partition_state``: per-partition producer state: offsets, reservations, sequences
- ``txn_metadata``: one transactional id's metadata and the transitions of its
  transaction (Kafka's TransactionMetadata)
- ``states``: Kafka's transaction states and the table of legal transitions
- ``completion_plan``: every object ending one transaction writes, fixed before any is
  (the Prepare record carries it)
- ``merge_state``: what the log says about merged objects, per partition
- ``shared_state``: what the log says about shared objects: each partition's tail of
  confirmed runs, and shared objects no tail names any more
- ``clean_state``: what the log says about compaction, per partition
- ``retention_state``: what the log says about a partition's log start offset (retention
  and DeleteRecords)
"""
