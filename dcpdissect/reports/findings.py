"""Findings as a tabulate table or JSON lines."""

from __future__ import annotations

from collections import Counter

from tabulate import tabulate

from ..analysis.findings import Finding
from ..analysis.rules import INFO, RULES, SEVERITY_RANK
from .messages import Clock, iso_time

FINDING_HEADERS = ("frame", "time", "conn", "vb", "rule", "message")


def frame_files_lines(summary, limit: int = 20) -> list[str]:
    """Where the frames of a file set come from, a line per run of frames from one file
    (the first ``limit`` runs); none for one file."""
    if not summary.frame_files:
        return []
    runs = list(summary.frame_files.runs())
    lines = [f"frames {a}–{b}: {path} frames {first}–{first + b - a}" if b > a
             else f"frame {a}: {path} frame {first}" for a, b, path, first in runs[:limit]]
    if len(runs) > limit:
        lines.append(f"... {len(runs) - limit} more runs (the jsonl records give each "
                     "frame's file)")
    return lines


def files_block(summary) -> str:
    """The ``files`` block under a table of a file set's frames ("" for one file)."""
    lines = frame_files_lines(summary)
    return "\nfiles\n" + "".join(f"{line}\n" for line in lines) if lines else ""


def finding_record(f: Finding, connection_info: dict | None = None,
                   where: tuple[str, int] | None = None) -> dict:
    """The object of one finding: ``analyze --format jsonl`` writes it with
    :func:`~dcpdissect.reports.messages.jsonl_line` (``ts_ns``, ``vbucket_uuid`` and the
    seqnos and uuids in ``fields`` as decimal strings), with the legend entry of its
    connection (:meth:`~.connections.ConnectionLegend.record`) as ``connection_info``; the
    pipeline's ``findings`` rows keep Python ints. ``vbucket_uuid`` and ``request_frame``
    are the uuid and frame of the stream request of the stream the finding falls in (None:
    no such stream, or not accounted), the ``req_vbucket_uuid`` and ``request_frame`` of
    that stream's record: findings join streams on (``connection``, ``vbucket``,
    ``vbucket_uuid``), and on ``request_frame`` for the one stream. ``where``: the file
    and frame there of ``frame`` when the capture is a file set (``file``, ``file_frame``)."""
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
    if where is not None:
        record["file"], record["file_frame"] = where
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


INFO_ROWS = 3       # an info rule's findings shown one a row; the others fold into one


def folded(findings: list[Finding], whole=()) -> list[Finding]:
    """``findings`` (in frame order) one a row for a reader: beyond its first
    :data:`INFO_ROWS`, the findings of an info rule (a TLS connection on another port, a
    stream judged no further, ...) fold into one row that counts them and names their
    connections and frames. Rules in ``whole`` (asked for by name) are never folded."""
    by_rule: dict[str, list[Finding]] = {}
    for f in findings:
        by_rule.setdefault(f.rule, []).append(f)
    rows = []
    for rid, items in by_rule.items():
        if RULES[rid].severity != INFO or rid in whole or len(items) <= INFO_ROWS + 1:
            rows += items
        else:
            rows += items[:INFO_ROWS] + [fold(rid, items[INFO_ROWS:])]
    return sorted(rows, key=Finding.sort_key)


def fold(rid: str, rest: list[Finding]) -> Finding:
    """One row standing for the findings ``rest`` of rule ``rid``."""
    conns = sorted({f.connection for f in rest if f.connection is not None})
    frames = [f.frame for f in rest if f.frame is not None]
    where = (f" on connection {conns[0]}" if len(conns) == 1
             else f" on {len(conns)} connections ({_listed(conns)})" if conns else "")
    span = f", frames {frames[0]}–{frames[-1]}" if frames else ""
    return Finding(rid, f"{len(rest)} more {rid} findings{where}{span}: --rule {rid} or "
                   "--format jsonl lists each", rest[0].frame, (), rest[0].ts_ns,
                   fields={"more": len(rest), "connections": conns})


def _listed(numbers: list[int], shown: int = 8) -> str:
    text = ", ".join(map(str, numbers[:shown]))
    return text + (f", … {numbers[-1]}" if len(numbers) > shown else "")


def findings_table(findings: list[Finding], clock: Clock | None = None, whole=()) -> str:
    """The per-rule counts, then the findings a row each (info rules :func:`folded`)."""
    if not findings:
        return "no findings\n"
    head = tabulate(summary_rows(findings), headers=("rule", "severity", "count", "title"),
                    disable_numparse=True)
    clock = clock or Clock()
    body = tabulate([finding_row(f, clock) for f in folded(findings, whole)],
                    headers=FINDING_HEADERS, disable_numparse=True,
                    maxcolwidths=[None, None, None, None, None, 100])
    return head + "\n\n" + body + "\n"
