"""Runs of batches rewritten as Kafka segments: merging and cleaning, the bytes.

- ``segment_merge``: a run of objects merged into one segment with its indexes
- ``shared_object``: one writer's flush, every partition's batches in one object, and its
  footer
- ``log_cleaner``: compaction of closed segments (Kafka's Cleaner: offset map, then filter)
"""
