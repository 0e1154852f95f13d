"""Sample scenarios (appended to builder.SPECS)."""

from __future__ import annotations

SPECS: tuple = ()
