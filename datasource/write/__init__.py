"""Writing to a txnlog root from Spark: one Kafka transaction per write or micro-batch.

- ``batch_writer``: ``df.write.format("txnlog")``
- ``stream_writer``: ``writeStream.format("txnlog")``
- ``task_writer``: the task side of every write (one member producer per task attempt)
- ``routing``: rows to topic-partitions, as Kafka's producer does
- ``framing``: ``value.format``/``key.format``: struct columns encoded with a registered
  schema and framed in Confluent's wire format
- ``commit_messages``: what a task hands the driver, cheap to unpickle
- ``stream_redo``: a micro-batch redone by the driver from its tasks' objects when the
  coordinator lost their (lazy) records
"""
