"""Findings as a tabulate table or JSON lines."""

from __future__ import annotations

from collections import Counter

from tabulate import tabulate

from ..analysis.findings import Finding
from ..analysis.rules import RULES, SEVERITY_RANK
from .messages import Clock, iso_time

FINDING_HEADERS = ("frame", "time", "conn", "vb", "rule", "message")


def finding_record(f: Finding, connection_info: dict | None = None) -> dict:
    """The object of one finding: ``analyze --format jsonl`` writes it with
    :func:`~dcpdissect.reports.messages.jsonl_line` (``ts_ns``, ``vbucket_uuid`` and the
    seqnos and uuids in ``fields`` as decimal strings), with the legend entry of its
    connection (:meth:`~.connections.ConnectionLegend.record`) as ``connection_info``; the
    pipeline's ``findings`` rows keep Python ints. ``vbucket_uuid`` and ``request_frame``
    are the uuid and frame of the stream request of the stream the finding falls in (None:
    no such stream, or not accounted), the ``req_vbucket_uuid`` and ``request_frame`` of
    that stream's record: findings join streams on (``connection``, ``vbucket``,
    ``vbucket_uuid``), and on ``request_frame`` for the one stream."""
    record = {
        "type": "finding",
        "rule": f.rule,
        "severity": f.severity,
        "title": f.title,
        "message": f.message,
        "frame": f.frame,
        "frames": list(f.frames),
        "time": iso_time(f.ts_ns) if f.ts_ns is not None else None,
        "ts_ns": f.ts_ns,
        "connection": f.connection,
        "vbucket": f.vbucket,
        "vbucket_uuid": f.vbucket_uuid,
        "request_frame": f.request_frame,
        "opaque": f.opaque,
        "fields": f.fields,
    }
    if connection_info is not None:
        record["connection_info"] = connection_info
    return record


def flow_control_records(series: dict) -> list[dict]:
    """One ``flow_control`` record per connection whose producer sent under a flow-control
    window: ``points`` are ``[time, unacked bytes]`` (time as in the findings), after every
    counted message and buffer ack, downsampled to at most 256 points; ``ts_ns`` is the
    first point's. Unacked bytes are below 2**32, so they stay JSON numbers."""
    return [{"type": "flow_control", "ts_ns": points[0][0] if points else None,
             "connection": conn,
             "points": [[iso_time(ts), unacked] for ts, unacked in points]}
            for conn, points in sorted(series.items())]


def summary_rows(findings: list[Finding]) -> list[list]:
    counts = Counter(f.rule for f in findings)
    order = sorted(counts, key=lambda r: (-SEVERITY_RANK[RULES[r].severity], r))
    return [[r, RULES[r].severity, counts[r], RULES[r].title] for r in order]


def finding_row(f: Finding, clock: Clock | None = None) -> list:
    """The finding's cells under :data:`FINDING_HEADERS`."""
    return [f.frame if f.frame is not None else "-", (clock or Clock()).text(f.ts_ns),
            f.connection if f.connection is not None else "-",
            f.vbucket if f.vbucket is not None else "-", f.rule, f.message]


def findings_table(findings: list[Finding], clock: Clock | None = None) -> str:
    if not findings:
        return "no findings\n"
    head = tabulate(summary_rows(findings), headers=("rule", "severity", "count", "title"),
                    disable_numparse=True)
    clock = clock or Clock()
    body = tabulate([finding_row(f, clock) for f in findings], headers=FINDING_HEADERS,
                    disable_numparse=True, maxcolwidths=[None, None, None, None, None, 100])
    return head + "\n\n" + body + "\n"
