"""Run the analyzer over one capture file."""

from __future__ import annotations

from ..reassembly.pdus import Options, Summary, iter_events
from .engine import Analyzer
from .findings import MAX_FINDINGS_PER_RULE, Finding
from .session import Pass
from .stream_summary import StreamSummary


def analyze_file(path: str, options: Options | None = None, summary: Summary | None = None,
                 progress=None, flow: dict | None = None) -> tuple[list[Finding], Summary]:
    """All findings of one capture, sorted by frame. A capture fault is recorded in
    ``summary.error`` after everything before it was analysed (it is not raised).
    ``progress`` (optional) gets ``attach(reader)`` once and ``update()`` now and then.
    ``flow`` (optional) is filled with each connection's unacked-bytes series
    (:meth:`dcpdissect.analysis.streams.flow.Flow.timelines`). Each finding carries its
    stream's request (:class:`~.stream_summary.StreamSummary`), as ``analyze`` gives it."""
    summary = summary or Summary()
    analyzer = Analyzer()
    hook = progress.attach if progress is not None else None
    run = Pass([StreamSummary(analyzer)], MAX_FINDINGS_PER_RULE, progress=progress).run(
        iter_events(path, options, summary, hook))
    if flow is not None:
        flow.update(analyzer.streams.flow.timelines())
    return sorted(run.findings, key=Finding.sort_key), summary
