"""Run the analyzer over one capture file."""

from __future__ import annotations

from ..reassembly.pdus import CaptureError, Options, Summary, iter_events
from .engine import Analyzer
from .findings import Finding


def analyze_file(path: str, options: Options | None = None, summary: Summary | None = None,
                 progress=None, flow: dict | None = None) -> tuple[list[Finding], Summary]:
    """All findings of one capture, sorted by frame. A capture fault is recorded in
    ``summary.error`` after everything before it was analysed (it is not raised).
    ``progress`` (optional) gets ``attach(reader)`` once and ``update()`` now and then.
    ``flow`` (optional) is filled with each connection's unacked-bytes series
    (:meth:`dcpdissect.analysis.streams.flow.Flow.timelines`)."""
    summary = summary or Summary()
    analyzer = Analyzer()
    findings: list[Finding] = []
    hook = progress.attach if progress is not None else None
    try:
        for n, ev in enumerate(iter_events(path, options, summary, hook)):
            findings += analyzer.feed(ev)
            if progress is not None and not n & 1023:
                progress.update()
    except CaptureError as exc:
        summary.error = str(exc)
    findings += analyzer.finish()
    if flow is not None:
        flow.update(analyzer.streams.flow.timelines())
    findings.sort(key=Finding.sort_key)
    return findings, summary
