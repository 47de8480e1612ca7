"""The transaction coordinator and its roles: Kafka's ``coordinator/transaction``.

- ``transaction_coordinator``: the requests (InitProducerId, AddPartitionsToTxn, reserve and
  confirm, EndTxn, ...), checked and wired to the roles that do them
- ``completion``: ending a transaction: the plan (``plan_completion``), Prepare ->
  markers -> Complete, grouped commits
- ``flush_calls``: one call per flush for many producers (a gateway's flush window):
  ``reserve_many`` and ``confirm_many``
- ``kafka_txn``: Kafka's transactional producers (before EndTxn v5) on this coordinator
- ``timers``: what runs when nobody asks: timeouts, expiry, stale reservations
- ``stable_changes``: which partitions' HW/LSO a log record can change
- ``stable_publisher``: publishing every partition's HW and LSO for readers
"""
