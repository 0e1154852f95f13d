"""One self-contained HTML report of a capture: summary, connection legend, streams,
findings and a timeline per vbucket (inline SVG). Nothing in it is fetched when it is
opened: the CSS is inline, the plots are inline SVG with text drawn as paths. Every string
taken from the capture is escaped; document keys and values are never printed."""

from __future__ import annotations

from html import escape
from pathlib import Path

from .markdown import sha256_of
from .messages import iso_time
from .timeline import finding_anchor, plot_name, svg_text, timelines

MAX_PLOTS = 64      # timelines on the page; --plot DIR writes them all

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em 2em;color:#222;background:#fff}
h1{font-size:1.4em;margin:0 0 .6em}h2{font-size:1.15em;margin:1.6em 0 .5em;
border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.3em 0 1em}
th,td{border:1px solid #ddd;padding:.25em .55em;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr:target{background:#fff3c4;outline:2px solid #e0a800}
.sev-error{color:#b00020;font-weight:600}.sev-warning{color:#a15c00;font-weight:600}
.sev-info{color:#1f5fa8}code{font:12px ui-monospace,monospace;white-space:nowrap}
figure{margin:.5em 0 1.5em}figure svg{max-width:100%;height:auto}
.note{color:#666}
"""


def _cells(values, numeric=()) -> str:
    return "".join(f'<td class="num">{escape(str(v))}</td>' if i in numeric
                   else f"<td>{escape(str(v))}</td>" for i, v in enumerate(values))


def _table(headers, rows, numeric=()) -> list[str]:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return (["<table>", f"<tr>{head}</tr>"]
            + [f"<tr>{_cells(r, numeric)}</tr>" for r in rows] + ["</table>"])


def _span(collector) -> str:
    if collector.first_ts is None:
        return "-"
    seconds = (collector.last_ts - collector.first_ts) / 1e9
    return (f"{iso_time(collector.first_ts)} – {iso_time(collector.last_ts)} "
            f"({seconds:.6f} s)")


def html_report(path, findings: list, summary, legend, collector, *, streams=None,
                redacted: bool = False) -> str:
    """The page. ``findings`` in report order (their position + 1 is their number and
    anchor), ``legend`` a :class:`~.connections.ConnectionLegend`, ``collector`` a
    :class:`~.timeline.TimelineCollector` fed with the same events, ``streams`` optional
    ``(headers, rows)`` of the streams table."""
    name = Path(str(path)).name
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>dcpdissect report: {escape(name)}</title>",
           f"<style>{CSS}</style></head><body>",
           f"<h1>dcpdissect report: {escape(name)}</h1>"]
    if redacted:
        out.append('<p class="note">Redacted: document keys and values are not shown.</p>')
    rows = [("file", name), ("SHA-256", sha256_of(path) or "unavailable"),
            ("frames", summary.frames), ("TCP connections", summary.connections),
            ("messages", summary.pdus), ("time span", _span(collector)),
            ("gaps", f"{summary.gaps} ({summary.gap_bytes} bytes)"),
            ("findings", len(findings))]
    if summary.not_mcbp:
        rows.insert(4, ("TCP connections not MCBP", f"{summary.not_mcbp} (not decoded)"))
    if summary.error:
        rows.append(("stopped", summary.error))
    out += ['<h2 id="capture">Capture</h2>', "<table>"]
    out += [f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in rows]
    out.append("</table>")

    out.append('<h2 id="connections">Connections</h2>')
    legend_rows = legend.rows()
    out += (_table(legend.columns(), legend_rows, numeric=(0, 6)) if legend_rows
            else ['<p class="note">No MCBP connection.</p>'])

    if streams is not None:
        out.append('<h2 id="streams">Streams</h2>')
        headers, stream_rows = streams
        out += (_table(headers, stream_rows) if stream_rows
                else ['<p class="note">No DCP stream.</p>'])

    out.append('<h2 id="findings">Findings</h2>')
    if findings:
        out += ["<table>", "<tr><th>#</th><th>frame</th><th>time</th><th>conn</th><th>vb</th>"
                "<th>severity</th><th>rule</th><th>message</th></tr>"]
        for number, f in enumerate(findings, 1):
            cells = [number, f.frame if f.frame is not None else "-",
                     iso_time(f.ts_ns) if f.ts_ns is not None else "-",
                     f.connection if f.connection is not None else "-",
                     f.vbucket if f.vbucket is not None else "-"]
            out.append(f'<tr id="{finding_anchor(number)}">{_cells(cells, (0, 1, 3, 4))}'
                       f'<td class="sev-{escape(f.severity)}">{escape(f.severity)}</td>'
                       f"<td><code>{escape(f.rule)}</code></td><td>{escape(f.message)}</td></tr>")
        out.append("</table>")
    else:
        out.append('<p class="note">No findings.</p>')

    out.append('<h2 id="timelines">Timelines</h2>')
    out.append('<p class="note">Seqno against time, per vbucket: snapshot ranges as bands, '
               "items as points, stream requests (the resume point: start seqno and the "
               "snapshot sent) as triangles with their snapshot as a bar, rollbacks as "
               "orange triangles, capture gaps as dotted lines, findings as red stars "
               "(click one to reach its row).</p>")
    plots = 0
    for where, fig in timelines(collector, findings, legend, limit=MAX_PLOTS):
        if where is None:
            out.append(f'<p class="note">{fig} more vbuckets without findings are not '
                       "plotted here; --plot DIR writes every timeline.</p>")
            break
        plots += 1
        name = escape(plot_name(where))
        out += [f'<figure id="timeline-{name}">', svg_text(fig, name), "</figure>"]
    if not plots:
        out.append('<p class="note">No DCP stream to plot.</p>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"

