"""``txnlog gateway``: a stateless process speaking Kafka's wire protocol over one root.

Kafka's own clients (librdkafka, the Java client, kafka-python) connect to it as to a
broker. Reads are served straight from storage (record batches verbatim, LSO/HW from the
published stable state, ``aborted_transactions`` from the ``.txnindex`` objects); whatever
needs a decision (producer ids, reservations, transactions, consumer-group membership and
offsets) goes to the root's coordinator through ``CoordinatorClient``. Any number of
gateways can serve one root. Protocol structures come from ``kio`` (generated from Kafka's
message schemas); nothing here hand-writes a request or response layout.

Modules: ``codec`` (kio: headers, bodies, plain dicts to kio entities), ``versions`` (what
ApiVersions advertises), ``errors`` (Kafka's error codes and the coordinator's errors
mapped to them), ``backend`` (storage, the coordinator client, caches, thread pools),
``consume`` (Metadata, ListOffsets, Fetch), ``produce`` (InitProducerId, Produce),
``flush_window`` (every connection's Produce requests of a window written as one object,
with one reserve and one confirm),
``validate`` (what a broker refuses or changes of a produced batch: its size, keyless
records of compacted topics, LogAppendTime),
``groups`` (FindCoordinator, consumer groups, offsets), ``txn`` (transactional producers),
``admin`` (Kafka's admin APIs over the coordinator's topic and config operations),
``admin_groups`` (the group and transaction admin APIs), ``admin_configs`` (Kafka's topic
config defaults, types and broker synonyms), ``server`` (framing, connections, SASL/PLAIN,
TLS, the CLI).
"""
