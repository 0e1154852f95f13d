"""The streams of a capture: one record per stream, as a table, JSON lines or Markdown.

:func:`stream_records` turns the accounting of :mod:`dcpdissect.analysis.stream_summary`
(and the capture's findings) into one dict per stream, keys :data:`STREAM_COLUMNS` after
``type`` (``ts_ns``: the time of the stream's first frame, its request when captured);
seqnos and uuids stay Python ints (``jsonl_line`` writes them as decimal strings).
:func:`table_rows` gives the short human view under :data:`TABLE_HEADERS`, 64-bit values
spelled by :func:`~dcpdissect.protocol.u64_text`.
"""

from __future__ import annotations

from tabulate import tabulate

from ..analysis.stream_summary import StreamStats, findings_by_stream
from ..protocol import u64_text
from .connections import role
from .messages import Clock, iso_time

STREAM_COLUMNS = (
    "ts_ns", "connection", "client", "server", "role", "bucket", "dcp_name",
    "vbucket", "stream_id", "opaque",
    "request_frame", "req_start_seqno", "req_end_seqno", "req_vbucket_uuid",
    "req_snap_start_seqno", "req_snap_end_seqno", "req_flags",
    "answer", "rollback_seqno", "answer_frame",
    "messages", "markers", "items",
    "first_seqno", "last_seqno", "min_seqno", "max_seqno",
    "snapshot_start_seqno", "snapshot_end_seqno",
    "ended", "end_reason", "end_frame",
    "first_frame", "last_frame", "first_time", "last_time", "duration",
    "errors", "warnings", "infos")
TABLE_HEADERS = ("conn", "vb", "sid", "req frame", "start", "requested", "answer", "markers",
                 "items", "seqnos", "last snapshot", "ended", "duration", "findings")
MAX_SEQNO = (1 << 64) - 1
SEVERITIES = (("error", "errors"), ("warning", "warnings"), ("info", "infos"))


def _address(ends: tuple) -> str:
    host, port = ends
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def _order(st: StreamStats) -> tuple:
    return (st.conn.id, st.vbucket, st.stream_id is not None, st.stream_id or 0, st.first_frame)


def stream_records(streams: list[StreamStats], findings=()) -> list[dict]:
    """One record per stream of ``streams`` (``StreamSummary.streams``), by connection,
    vbucket, stream id and first frame, with the ``findings`` that fall in each counted by
    severity."""
    counted = findings_by_stream(streams, findings)
    out = []
    for i in sorted(range(len(streams)), key=lambda i: _order(streams[i])):
        st = streams[i]
        c, req = st.conn, st.request or {}
        severities = counted.get(i, {})
        record = {
            "type": "stream", "ts_ns": st.first_ts_ns,
            "connection": c.id, "client": _address(c.client), "server": _address(c.server),
            "role": role(c.negotiation), "bucket": c.negotiation.bucket,
            "dcp_name": c.negotiation.name,
            "vbucket": st.vbucket, "stream_id": st.stream_id, "opaque": st.opaque,
            "request_frame": st.request_frame,
            "req_start_seqno": req.get("start_seqno"), "req_end_seqno": req.get("end_seqno"),
            "req_vbucket_uuid": req.get("vbucket_uuid"),
            "req_snap_start_seqno": req.get("snap_start_seqno"),
            "req_snap_end_seqno": req.get("snap_end_seqno"), "req_flags": req.get("flags"),
            "answer": st.answer, "rollback_seqno": st.rollback_seqno,
            "answer_frame": st.answer_frame,
            "messages": st.messages, "markers": st.markers, "items": dict(st.items),
            "first_seqno": st.first_seqno, "last_seqno": st.last_seqno,
            "min_seqno": st.min_seqno, "max_seqno": st.max_seqno,
            "snapshot_start_seqno": st.snapshot[0] if st.snapshot else None,
            "snapshot_end_seqno": st.snapshot[1] if st.snapshot else None,
            "ended": st.ended, "end_reason": st.end_reason, "end_frame": st.end_frame,
            "first_frame": st.first_frame, "last_frame": st.last_frame,
            "first_time": iso_time(st.first_ts_ns), "last_time": iso_time(st.last_ts_ns),
            "duration": round(st.duration_ns / 1e9, 9),
        }
        for severity, column in SEVERITIES:
            record[column] = severities.get(severity, 0)
        out.append(record)
    return out


def _seqno(n) -> str:
    return "max" if n == MAX_SEQNO else u64_text(n)


def _requested(r: dict) -> str:
    if r["request_frame"] is None:
        return "not captured"
    return (f"{u64_text(r['req_start_seqno'])}..{_seqno(r['req_end_seqno'])} "
            f"uuid {u64_text(r['req_vbucket_uuid'])} "
            f"snap [{u64_text(r['req_snap_start_seqno'])},{u64_text(r['req_snap_end_seqno'])}]")


def _answer(r: dict) -> str:
    if r["answer"] is None:
        return "-" if r["request_frame"] is None else "not captured"
    if r["answer"] == "rollback":
        return f"rollback to {r['rollback_seqno']}"
    return r["answer"]


def _items(r: dict) -> str:
    items = [(name.removeprefix("Dcp"), n) for name, n in r["items"].items()
             if name != "DcpSnapshotMarker"]
    return ", ".join(f"{name} {n}" for name, n in items) or "-"


def _ended(r: dict) -> str:
    if r["ended"] is None:
        return "-"
    text = r["ended"] + (f" {r['end_reason']}" if r["end_reason"] else "")
    return text + (f" (frame {r['end_frame']})" if r["end_frame"] else "")


def _findings(r: dict) -> str:
    parts = [f"{r[column]} {severity}{'s' if r[column] > 1 else ''}"
             for severity, column in SEVERITIES if r[column]]
    return ", ".join(parts) or "-"


def table_rows(records: list[dict], clock: Clock | None = None) -> list[list]:
    """The short view of each record, under :data:`TABLE_HEADERS`; start times by
    ``clock`` (``--time``; default absolute)."""
    clock = clock or Clock()
    return [[r["connection"], r["vbucket"], "-" if r["stream_id"] is None else r["stream_id"],
             "-" if r["request_frame"] is None else r["request_frame"],
             clock.text(r["ts_ns"]), _requested(r), _answer(r), r["markers"], _items(r),
             "-" if r["first_seqno"] is None else f"{r['first_seqno']}..{r['last_seqno']}",
             "-" if r["snapshot_start_seqno"] is None
             else f"[{r['snapshot_start_seqno']},{r['snapshot_end_seqno']}]",
             _ended(r), f"{r['duration']:.6f} s", _findings(r)] for r in records]


LEGEND_HEADERS = ("conn", "client", "server", "role", "bucket", "dcp name")


def legend_rows(records: list[dict]) -> list[list]:
    """Who each connection of the streams is: one row per connection."""
    seen: dict[int, list] = {}
    for r in records:
        seen.setdefault(r["connection"], [r["connection"], r["client"], r["server"],
                                          r["role"] or "-", r["bucket"] or "-",
                                          r["dcp_name"] or "-"])
    return [seen[c] for c in sorted(seen)]


def streams_table(records: list[dict], clock: Clock | None = None) -> str:
    """The connections of the streams, then one row per stream."""
    if not records:
        return "no streams\n"
    return (tabulate(legend_rows(records), headers=LEGEND_HEADERS, disable_numparse=True)
            + "\n\n" + tabulate(table_rows(records, clock), headers=TABLE_HEADERS,
                                disable_numparse=True) + "\n")


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def streams_markdown(records: list[dict]) -> list[str]:
    """The ``## Streams`` section of a Markdown report (lines)."""
    out = ["## Streams", ""]
    if not records:
        return out + ["No DCP streams.", ""]
    out += ["| " + " | ".join(LEGEND_HEADERS) + " |", "|" + "---|" * len(LEGEND_HEADERS)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in legend_rows(records)]
    out += ["", "| " + " | ".join(TABLE_HEADERS) + " |", "|" + "---|" * len(TABLE_HEADERS)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table_rows(records)]
    return out + [""]
