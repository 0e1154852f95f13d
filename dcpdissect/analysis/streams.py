"""Per-connection and per-stream state machines (stream semantics, correlation, resume)."""

from __future__ import annotations

from .findings import Finding


class StreamTracker:
    """Tracks DCP connections and streams; each hook returns the findings it completes."""

    def on_open(self, ev) -> list[Finding]:
        return []

    def on_message(self, pdu, msg, conn) -> list[Finding]:
        return []

    def on_gap(self, ev) -> list[Finding]:
        return []

    def on_resync(self, ev) -> list[Finding]:
        return []

    def on_close(self, ev) -> list[Finding]:
        return []

    def finish(self) -> list[Finding]:
        return []
