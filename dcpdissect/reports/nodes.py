"""Two capture points together (``dcpdissect nodes``): the paired connections, the clock
offset with its bound, the lag per vbucket and the messages lost between the points, as a
text report, JSON-lines records or Markdown (the HTML page is :mod:`.nodes_html`). More
than two points: each point's offset from the first, then every pair of points so."""

from __future__ import annotations

from tabulate import tabulate

from ..analysis.nodes import C2S, NodesReport, Pairing, PointConnection, PointsReport, Transit
from ..protocol import OPCODE_NAMES
from .connections import _address
from ..analysis.rules import RULES, SEVERITY_RANK
from .findings import finding_record, frame_files_lines
from .markdown import _cell, finding_frames, frame_filter
from .messages import iso_time, jsonl_line


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


def offset_text(r: NodesReport) -> str:
    """The clock offset of B from A with its bound, in words."""
    o = r.offset
    if o is None:
        return (f"clock offset ({r.b.name} - {r.a.name}): not decided (no connection seen "
                "at both points in both directions, or observations that contradict "
                "each other)")
    return (f"clock offset ({r.b.name} - {r.a.name}): {_seconds(o.estimate)} "
            f"± {o.uncertainty / 1e3:.1f} us, within [{_seconds(o.low)}, "
            f"{_seconds(o.high)}] from {o.observations} observations")


def pair_lines(r: NodesReport) -> list[str]:
    """One line per paired connection, then one per connection seen at one point only."""
    names = (r.a.name, r.b.name)
    unpaired = [(pt.name, c) for pt, side in ((r.a, "a"), (r.b, "b")) for c in pt.connections
                if all(getattr(p, side) is not c for p in r.pairings)]
    return ([_pair_text(p, names) for p in r.pairings]
            + [f"{name} conn {c.conn} ({_label(c)}): not seen at the other point"
               for name, c in unpaired])


LAG_HEADERS = ("vb", "messages", "min", "median", "max")


def lag_rows(r: NodesReport) -> list[tuple]:
    return [(v.vbucket, v.messages, _ms(v.min_ns), _ms(v.median_ns), _ms(v.max_ns))
            for v in r.lags]


def point_frames(f) -> list[tuple[str, list[int]]]:
    """The frames a finding of two points cites, per point: at the sending point the
    message (and the marker it acknowledges), at the other the messages around the gap
    (and the marker there)."""
    here = sorted({*finding_frames(f), *f.context})
    there = sorted({*f.fields.get("gap_frames", ()),
                    *([f.fields["other_marker_frame"]] if "other_marker_frame" in f.fields
                      else ())})
    return [(f.fields["point"], here), (f.fields["other_point"], there)]


def nodes_text(r: NodesReport) -> str:
    lines = [f"points: A = {r.a.name} ({r.a.path}), B = {r.b.name} ({r.b.path})",
             f"paired connections: {len(r.pairings)}"]
    lines += [f"  {line}" for line in pair_lines(r)]
    lines.append(offset_text(r))
    if r.lags:
        lines += ["", "replication lag per vbucket (producer send -> consumer receive, "
                      "offset-corrected, ms):",
                  tabulate(lag_rows(r), headers=LAG_HEADERS, disable_numparse=True)]
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


def _where(r: NodesReport, f) -> tuple[str, int] | None:
    point = r.a if f.fields["point"] == r.a.name else r.b
    return point.summary.locate(f.frame)


def nodes_markdown(r: NodesReport) -> str:
    """The points, paired connections, clock offset, lag per vbucket, then the findings
    grouped by rule: each with its rule's title and rationale, its frames at each point
    and a Wireshark filter per point."""
    out = [f"# dcpdissect nodes: {r.a.name} and {r.b.name}", "", "## Points", "",
           "| | point | capture | frames | messages |", "|---|---|---|---|---|"]
    out += [f"| {side} | {_cell(pt.name)} | `{_cell(pt.path)}` | {pt.summary.frames} | "
            f"{pt.summary.pdus} |" for side, pt in (("A", r.a), ("B", r.b))]
    for point in (r.a, r.b):
        if point.summary.frame_files:
            out += ["", f"Files of {_cell(point.name)} (its frames are numbered across them):",
                    "", *(f"- {_cell(line)}" for line in frame_files_lines(point.summary))]
    out += ["", "## Connections", ""] + [f"- {_cell(line)}" for line in pair_lines(r)]
    out += ["", "## Clock offset", "", offset_text(r), ""]
    if r.lags:
        out += ["## Replication lag per vbucket", "",
                "Producer send -> consumer receive, offset-corrected, ms.", "",
                "| " + " | ".join(LAG_HEADERS) + " |", "|---|---|---|---|---|"]
        out += ["| " + " | ".join(map(str, row)) + " |" for row in lag_rows(r)] + [""]
    out += ["## Findings", ""]
    if r.offset is None:
        return "\n".join(out + ["Losses not judged: without a clock offset the direction of "
                                "travel between the points is not known."]) + "\n"
    if not r.findings:
        return "\n".join(out + ["No message lost between the points."]) + "\n"
    groups: dict[str, list] = {}
    for f in sorted(r.findings, key=lambda f: (-SEVERITY_RANK[f.severity], f.rule)):
        groups.setdefault(f.rule, []).append(f)
    out += ["| rule | severity | count | title |", "|---|---|---|---|"]
    out += [f"| [`{rid}`](#{rid}) | {RULES[rid].severity} | {len(items)} | "
            f"{_cell(RULES[rid].title)} |" for rid, items in groups.items()] + [""]
    for rid, items in groups.items():
        rule = RULES[rid]
        out += [f"## {rid}", "", f"**{rule.severity}**: {rule.title}", "",
                f"Rationale: {rule.rationale}", ""]
        for f in items:
            out += [f"### {f.fields['point']} frame {f.frame}: {f.message}", "",
                    "| point | frames | Wireshark filter |", "|---|---|---|"]
            out += [f"| {_cell(point)} | {', '.join(map(str, frames))} | "
                    f"`{frame_filter(frames)}` |" for point, frames in point_frames(f)]
            out += ["", "<details><summary>JSON</summary>", "", "```json",
                    jsonl_line(finding_record(f, where=_where(r, f))).rstrip("\n"), "```", "",
                    "</details>", ""]
    return "\n".join(out).rstrip("\n") + "\n"


NO_CONNECTION = "no connection seen at both points: nothing to compare"


def offset_lines(m: PointsReport) -> list[str]:
    """Each point's clock offset from the first point, with the chain of pairs it sums."""
    first = m.points[0].name
    out = []
    for pt, o in zip(m.points[1:], m.offsets[1:]):
        if o is None:
            out.append(f"{pt.name} - {first}: not decided (no chain of pairs of points with "
                       "a clock offset)")
        else:
            out.append(f"{pt.name} - {first}: {_seconds(o.estimate)} ± "
                       f"{o.uncertainty / 1e3:.1f} us, within [{_seconds(o.low)}, "
                       f"{_seconds(o.high)}] (pairs summed: {' -> '.join(o.chain)})")
    return out


def points_text(m: PointsReport) -> str:
    """The points, their offsets from the first, then each pair's report."""
    lines = ["points: " + ", ".join(f"{pt.name} ({pt.path})" for pt in m.points),
             f"clock offsets from {m.points[0].name}:", *(f"  {x}" for x in offset_lines(m))]
    for r in m.pairs:
        lines += ["", f"== {r.a.name} and {r.b.name} =="]
        lines += [NO_CONNECTION] if not r.pairings else nodes_text(r).rstrip("\n").split("\n")
    return "\n".join(lines) + "\n"


def points_records(m: PointsReport) -> list[dict]:
    """A ``clock_offset`` record per point after the first, from the first point, with the
    ``chain`` of points it sums through; then each pair's :func:`nodes_records`, each with
    the ``pair`` of point names it is of."""
    first = m.points[0]
    out = [{"type": "clock_offset", "ts_ns": first.summary.first_ts_ns, "point": pt.name,
            "reference": first.name, "offset_ns": o and o.estimate,
            "uncertainty_ns": o and o.uncertainty, "low_ns": o and o.low,
            "high_ns": o and o.high, "observations": o.observations if o else 0,
            "chain": list(o.chain) if o else []}
           for pt, o in zip(m.points[1:], m.offsets[1:])]
    for r in m.pairs:
        pair = [r.a.name, r.b.name]
        out += [{**rec, "pair": pair} for rec in nodes_records(r)
                if r.pairings or rec["type"] == "clock_offset"]
    return out


def points_markdown(m: PointsReport) -> str:
    """The points and their offsets, then each pair's :func:`nodes_markdown`, a level
    down."""
    out = ["# dcpdissect nodes: " + ", ".join(pt.name for pt in m.points), "",
           "## Clock offsets", "", f"From {_cell(m.points[0].name)}:", "",
           *(f"- {_cell(x)}" for x in offset_lines(m))]
    for r in m.pairs:
        out += ["", f"## {_cell(r.a.name)} and {_cell(r.b.name)}", ""]
        if not r.pairings:
            out.append(NO_CONNECTION[0].upper() + NO_CONNECTION[1:] + ".")
            continue
        body = nodes_markdown(r).split("\n")[1:]
        out += ["#" + line if line.startswith("#") else line for line in body]
    return "\n".join(out).rstrip("\n") + "\n"
