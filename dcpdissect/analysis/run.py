"""Run the analyzer over one capture file."""

from __future__ import annotations

from ..reassembly.pdus import CaptureError, Options, Summary, iter_events
from .engine import Analyzer
from .findings import Finding


def analyze_file(path: str, options: Options | None = None,
                 summary: Summary | None = None, reader_hook=None) -> tuple[list[Finding], Summary]:
    """All findings of one capture, sorted by frame. A capture fault is recorded in
    ``summary.error`` after everything before it was analysed (it is not raised)."""
    summary = summary or Summary()
    analyzer = Analyzer()
    findings: list[Finding] = []
    try:
        for ev in iter_events(path, options, summary, reader_hook):
            findings += analyzer.feed(ev)
    except CaptureError as exc:
        summary.error = str(exc)
    findings += analyzer.finish()
    findings.sort(key=Finding.sort_key)
    return findings, summary
