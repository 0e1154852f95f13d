"""Sync-write (durability) rules: prepares and their resolution, the HCS, as the replica's passive durability monitor and the producer see them.

Judged by :mod:`dcpdissect.analysis.streams`.
"""

from .model import ERROR, INFO, WARNING, rule  # noqa: F401

RULES: tuple = ()
