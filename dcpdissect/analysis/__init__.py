"""Analysis: the rule catalogue, per-message checks, stream state machines, findings."""

from . import engine  # noqa: F401  (registers every rule, always in the same order)
