"""Checkpoint code: HF-format export (and, as it grows, the multi-role boundary writer/reader)."""
