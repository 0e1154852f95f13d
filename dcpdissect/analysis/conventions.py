"""Start-seqno convention of every snapshot marker, for display next to the marker."""

from __future__ import annotations

from collections.abc import Iterable

from ..reassembly.pdus import CaptureError, iter_events
from .engine import Analyzer

LABELS = {
    "first-of-stream": "first marker of the stream: start = requested start or snap_start",
    "checkpoint": "memory marker with CHK: start = checkpoint start, <= the first item",
    "first-item": "memory marker without CHK: start = the first item's seqno",
    "backfill": "disk marker: start = backfill (or checkpoint) start, <= the first item",
    "no-items": "memory marker without CHK and without items: convention not decidable",
    "inconsistent": "start fits none of the conventions (snapshot-start-inconsistent)",
    "dropped": "marker behind the last seqno, dropped by a consumer",
    "inside-oso": "marker inside an OSO snapshot",
    "invalid": "start > end",
    "unknown": "stream state unknown (request not captured, or after a gap/resync)",
}


def marker_key(pdu) -> tuple[int, int, int]:
    """(connection, frame, stream offset): which marker a label is about."""
    return (pdu.conn, pdu.frame, pdu.offset)


def classify_markers(events: Iterable) -> dict[tuple[int, int, int], str]:
    """Map :func:`marker_key` of each server-sent snapshot marker in ``events`` (as yielded
    by :func:`dcpdissect.reassembly.pdus.iter_events`) to its start-seqno convention, one
    of :data:`LABELS`, as the analyzer's ``on_marker`` reports them. A capture fault ends
    the labelling where it occurs."""
    labels: dict[tuple[int, int, int], str] = {}

    def keep(pdu, label):
        if label is not None:
            labels[marker_key(pdu)] = label

    analyzer = Analyzer(on_marker=keep)
    try:
        for ev in events:
            analyzer.feed(ev)
    except CaptureError:
        pass                    # a damaged capture: label what was read before the fault
    analyzer.finish()
    return labels


def classify_file(path: str) -> dict[tuple[int, int, int], str]:
    """:func:`classify_markers` over one capture file."""
    return classify_markers(iter_events(path))
