"""Fault-injection harness with Jepsen-style checks; entry point: run.py."""
