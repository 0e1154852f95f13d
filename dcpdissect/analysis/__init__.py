"""Analysis: the rule catalogue (``rules``), what each connection negotiated, per-message
checks, stream state machines, the rollback model, findings."""
