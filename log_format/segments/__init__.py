"""Runs of batches rewritten as Kafka segments: merging and cleaning, the bytes.

- ``segment_merge``: a run of objects merged into one segment with its indexes
- ``log_cleaner``: compaction of closed segments (Kafka's Cleaner: offset map, then filter)
"""
