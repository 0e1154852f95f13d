"""Stream lifecycle rules: nothing for a stream after its end, its close, a completed takeover or a dropped collection; change-stream (history) snapshots.

Judged by :mod:`dcpdissect.analysis.streams`.
"""

from .model import ERROR, INFO, WARNING, rule  # noqa: F401

RULES: tuple = ()
