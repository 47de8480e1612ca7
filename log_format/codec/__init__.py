"""The bytes of Kafka's log: pure functions of their input, no root, no I/O.

- ``crc``, ``varint``, ``compression``: checksums, varints, the five codecs
- ``batch_header``, ``records``, ``control``: record batches, records, transaction markers
- ``indexes``: ``.index``, ``.timeindex``, ``.txnindex``
- ``partitioner``: murmur2 partition choice
- ``consumer_offsets``: the ``__consumer_offsets`` records and partition choice
- ``dump``, ``dump_decoders``: kafka-dump-log's output (``txnlog dump``)
"""
