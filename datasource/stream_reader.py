"""Placeholder until the streaming source lands (issue 6)."""
