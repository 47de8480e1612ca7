"""Fault-injection harness with Jepsen-style checks (issue 7); entry point: run.py."""
