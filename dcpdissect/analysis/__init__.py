"""Analysis: the rule catalogue, per-message checks, stream state machines, findings."""
