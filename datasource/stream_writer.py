"""Placeholder until the streaming sink lands (issue 6)."""
