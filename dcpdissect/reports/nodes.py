"""Two capture points together (``dcpdissect nodes``): the paired connections, the clock
offset with its bound, the lag per vbucket and the messages lost between the points, as a
text report or JSON-lines records."""

from __future__ import annotations

from tabulate import tabulate

from ..analysis.nodes import C2S, NodesReport, Pairing, PointConnection, Transit
from ..protocol import OPCODE_NAMES
from .connections import _address
from .findings import finding_record, frame_files_lines
from .messages import iso_time


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def _seconds(ns: int) -> str:
    return f"{ns / 1e9:+.6f} s"


def _pair_text(p: Pairing, names: tuple[str, str]) -> str:
    how = "one TCP connection" if p.how == "tcp" else f"relay legs of DCP connection {p.a.name!r}"
    return (f"{names[0]} conn {p.a.conn} ({_label(p.a)}) = {names[1]} conn {p.b.conn} "
            f"({_label(p.b)}): {how}")


def _label(c: PointConnection) -> str:
    return f"{_address(c.client)} -> {_address(c.server)}"


def nodes_text(r: NodesReport) -> str:
    names = (r.a.name, r.b.name)
    lines = [f"points: A = {r.a.name} ({r.a.path}), B = {r.b.name} ({r.b.path})"]
    lines.append(f"paired connections: {len(r.pairings)}")
    lines += [f"  {_pair_text(p, names)}" for p in r.pairings]
    unpaired = [(pt.name, c) for pt, side in ((r.a, "a"), (r.b, "b")) for c in pt.connections
                if all(getattr(p, side) is not c for p in r.pairings)]
    lines += [f"  {name} conn {c.conn} ({_label(c)}): not seen at the other point"
              for name, c in unpaired]
    o = r.offset
    if o is None:
        lines.append(f"clock offset ({r.b.name} - {r.a.name}): not decided (no connection seen "
                     "at both points in both directions, or observations that contradict "
                     "each other)")
    else:
        lines.append(f"clock offset ({r.b.name} - {r.a.name}): {_seconds(o.estimate)} "
                     f"± {o.uncertainty / 1e3:.1f} us, within [{_seconds(o.low)}, "
                     f"{_seconds(o.high)}] from {o.observations} observations")
    if r.lags:
        lines += ["", "replication lag per vbucket (producer send -> consumer receive, "
                      "offset-corrected, ms):",
                  tabulate([(v.vbucket, v.messages, _ms(v.min_ns), _ms(v.median_ns),
                             _ms(v.max_ns)) for v in r.lags],
                           headers=("vb", "messages", "min", "median", "max"),
                           disable_numparse=True)]
    lines.append("")
    if r.offset is None:
        lines.append("losses not judged: without a clock offset the direction of travel "
                     "between the points is not known")
    elif r.findings:
        lines.append(tabulate([(f.frame, f.fields["point"], f.vbucket, f.rule, f.message)
                               for f in r.findings],
                              headers=("frame", "point", "vb", "rule", "message")))
    else:
        lines.append("no message lost between the points")
    for point in (r.a, r.b):
        if point.summary.frame_files:
            lines += ["", f"files of {point.name} (its frames are numbered across them)",
                      *frame_files_lines(point.summary)]
    return "\n".join(lines) + "\n"


def _transit_record(t: Transit, names: dict[str, str]) -> dict:
    down = "b" if t.upstream == "a" else "a"
    return {
        "type": "lag",
        "ts_ns": t.ts_ns,
        "time": iso_time(t.ts_ns),
        "vbucket": t.sent.vbucket,
        "opcode": t.sent.opcode,
        "opcode_name": OPCODE_NAMES.get(t.sent.opcode),
        "seqno": t.sent.seqno,
        "direction": "c2s" if t.direction == C2S else "s2c",
        "lag_ns": t.lag_ns,
        "sent_point": names[t.upstream],
        "sent_frame": t.sent.frame,
        "received_point": names[down],
        "received_frame": t.received.frame,
    }


def nodes_records(r: NodesReport) -> list[dict]:
    """``clock_offset``, ``connection_pair``, then the ``lag`` of every producer stream
    message seen at both points and the ``finding`` records, in time order (a finding at
    a point read from several files with its ``file`` and ``file_frame``)."""
    names = {"a": r.a.name, "b": r.b.name}
    o = r.offset
    out = [{"type": "clock_offset", "ts_ns": r.a.summary.first_ts_ns, "point": r.b.name,
            "reference": r.a.name, "offset_ns": o and o.estimate,
            "uncertainty_ns": o and o.uncertainty, "low_ns": o and o.low,
            "high_ns": o and o.high, "observations": o.observations if o else 0}]
    for k, p in enumerate(r.pairings):
        bound = r.bounds.get(k)
        out.append({"type": "connection_pair", "ts_ns": None, "how": p.how,
                    "connection": p.a.conn, "other_connection": p.b.conn,
                    "client": _address(p.a.client), "server": _address(p.a.server),
                    "other_client": _address(p.b.client),
                    "other_server": _address(p.b.server),
                    "dcp_name": p.a.name,
                    "low_ns": bound and bound.low, "high_ns": bound and bound.high})
    timed = [(t.ts_ns, _transit_record(t, names)) for t in r.transits
             if t.direction != C2S and t.sent.vbucket is not None]
    points = {r.a.name: r.a, r.b.name: r.b}
    timed += [(f.ts_ns or 0, finding_record(f, where=points[f.fields["point"]].summary.locate(
        f.frame))) for f in r.findings]
    out += [rec for _, rec in sorted(timed, key=lambda x: x[0])]
    return out
