"""txnlog.datasource: the PySpark Python Data Source ``txnlog``.

- ``source``: the entry point Spark instantiates (``spark.read/readStream/write/
  writeStream.format("txnlog")``)
- ``options``: the options, parsed and validated; ``kafka_options``: spark-sql-kafka's
  options mapped, accepted as no-ops or refused; ``errors``: ``InvalidOptionError``
- ``schema``: the Spark schemas, the same as Spark's Kafka connector's
- ``stream_offsets``: the streaming offsets, shared by the source and the sink
- ``worker_daemon``: a PySpark worker daemon that loads the codec once before forking
- ``read``: batch and streaming reads (package)
- ``write``: batch and streaming writes, one Kafka transaction each (package)
- ``public_api``: the ``txnlog`` package (``from txnlog import ...``);
  ``pyspark_txnlog``: the module Spark discovers the format by
"""
