"""``txnlog schema-registry``: Confluent Schema Registry's REST API, kept in the root.

Its state is the compacted ``_schemas`` topic of the root, in Confluent's record format,
written by txnlog's producer and read by txnlog's consumer: the process keeps nothing of
its own, so any number of them serve one root. Ids and versions that must be handed out
once are claimed with put-if-absent objects beside it.

Modules, by role: ``service`` (the CLI process: arguments, token and TLS, signals),
``http_api`` (the REST routes over aiohttp), ``registry`` (the operations: register, look
up, delete, config, mode, compatibility tests), ``store`` (the ``_schemas`` topic: catch up,
write), ``state`` (what the records build), ``records`` (the record format), ``claims``
(exclusive ids and versions), ``schemas`` (parsing and canonical text per schema type),
``catalog`` (a read-only view of ``_schemas`` for readers that decode values: the Spark
source, ``txnlog dump``), ``dump_decoder`` (``txnlog dump --value-decoder``: framed values
as JSON), ``avro_compat``, ``json_compat`` and ``protobuf_schema`` (each
type's compatibility rules; protoc for .proto text), ``errors`` (Confluent's error codes
and messages).
"""
