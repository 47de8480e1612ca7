"""txnlog.log_format: Kafka's v2 log format, its files and its home on object storage."""
