"""txnlog.coordinator: the transaction coordinator, its jobs, and everything that talks to it.

Packages, by role (Kafka keeps the same split: ``coordinator/transaction``,
``coordinator/group``, the log manager's jobs, the server, the clients):

- ``transaction``: the transaction coordinator and its roles (requests, completion,
  timers, the stable-offset publisher)
- ``state``: the coordinator's own log ``__transaction_state-0`` and the state it rebuilds;
  what every log record does to the state
- ``maintenance``: the log-maintenance jobs (merging, compaction, retention, topic admin)
- ``group``: consumer groups (membership, transactional offset commits)
- ``server``: the ``txnlog coordinator`` process (HTTP API, limits, metrics, standby)
- ``client``: what talks to a coordinator: ``CoordinatorClient``, the one write path, the
  Python producers, ``AdminClient``, the embedded starter
- ``gateway``: ``txnlog gateway``, Kafka's wire protocol over a root
- ``schema_registry``: ``txnlog schema-registry``, Confluent's Schema Registry REST API
  kept in the root's ``_schemas`` topic
- ``access``: principals, SCRAM credentials and ACLs kept in the root, and Kafka's
  authorization rules (the gateway enforces them)
- ``cli``: the ``txnlog`` command line

Modules both sides share: ``errors`` (Kafka's error names as exceptions), ``security``
(token and TLS), ``topic_config`` (topic configs as Kafka defines them), ``wire`` (bytes
in the API's JSON) and ``faults`` (crash points for tests, ``TXNLOG_FAULTS``, armed in the
coordinator and in the gateway). The clients, the gateway and the schema registry never import the
server's packages (``tests/test_layering.py``).
"""
