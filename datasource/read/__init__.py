"""Reading a txnlog root from Spark: batch and streaming.

- ``batch_reader``: ``spark.read.format("txnlog")``: plan on the driver, decode in tasks
- ``stream_reader``: ``spark.readStream.format("txnlog")``: micro-batches with admission
  control
- ``planning``: which partitions, which offset ranges, how many tasks
- ``projection``: the schema Spark asks for, column for column
- ``pushdown``: filters on topic, partition, offset and timestamp
- ``value_decoding``: ``key.format``/``value.format``: Confluent-framed keys and values into
  typed columns, schemas from the root's ``_schemas``; Avro's reader
- ``protobuf_values``: ``format=protobuf``: message indexes, descriptors to Spark types,
  messages to Arrow
- ``json_values``: ``format=json``: JSON Schemas to Spark types, documents to Arrow
- ``lag_metrics``: Spark's Kafka lag metrics from the query's progress
- ``stream_checkpoint``: restarting a query whose driver died writing its first offsets
"""
