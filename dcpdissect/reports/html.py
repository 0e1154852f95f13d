"""One self-contained HTML report of a capture, findings first: counts by severity and a
table of contents, the findings by rule and one by one, then each finding in detail (its
rule's title and rationale, decoded fields, Wireshark filter, hexdump) beside the timeline of
its moment (inline SVG, :mod:`.moment_plot`), and last the capture, its connections and its
streams. Nothing in it is fetched when it is opened: the CSS is inline, the plots are inline
SVG. Every string taken from the capture is escaped."""

from __future__ import annotations

from collections import Counter
from html import escape
from pathlib import Path

from ..analysis.rules import INFO, RULES, SEVERITY_RANK
from .findings import INFO_ROWS
from .markdown import HEXDUMP_BYTES, file_rows, finding_frames, frame_filter, hexdump
from .messages import iso_time
from .moment_plot import conn_color, layout, moment_svg
from .moments import finding_key

MAX_DETAILED = 25       # findings of one rule shown in detail; the others are listed
ROWS_PER_RULE = 100     # findings of one rule given a row; the others are counted

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em 2em;color:#222;background:#fff}
h1{font-size:1.4em;margin:0 0 .4em}h2{font-size:1.2em;margin:1.6em 0 .5em;
border-bottom:1px solid #ddd;padding-bottom:.2em}h3{font-size:1.05em;margin:1.4em 0 .3em}
h4{font-size:1em;margin:1.1em 0 .3em}h3 code{font-size:1em}
table{border-collapse:collapse;margin:.3em 0 1em}
th,td{border:1px solid #ddd;padding:.25em .55em;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.time,span.time{white-space:nowrap;font-variant-numeric:tabular-nums}
tr:target,section:target{background:#fff3c4;outline:2px solid #e0a800}
.sev-error{color:#b00020;font-weight:600}.sev-warning{color:#a15c00;font-weight:600}
.sev-info{color:#1f5fa8}code{font:12px ui-monospace,monospace}
pre{font:12px/1.35 ui-monospace,monospace;background:#f7f7f7;padding:.5em;overflow-x:auto}
.counts{font-size:1.1em;margin:.2em 0 .6em}.counts span{margin-right:1.2em}
nav{margin:.3em 0 .8em}
figure{margin:.5em 0 1.5em}figure svg{max-width:100%;height:auto;display:block}
figcaption{font-weight:600;margin:.2em 0}
.key{font-size:12px;color:#444;margin:.2em 0}.key span{margin-right:1em;white-space:nowrap}
.sw{display:inline-block;width:.9em;height:.9em;vertical-align:-.1em;margin-right:.3em;
border:1px solid #0003}
table.events{font-size:12px}table.events tr.hit{background:#fde8e8}
.note{color:#666}
"""


def _cells(values, numeric=()) -> str:
    return "".join(f'<td class="num">{escape(str(v))}</td>' if i in numeric
                   else f"<td>{escape(str(v))}</td>" for i, v in enumerate(values))


def _table(headers, rows, numeric=()) -> list[str]:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return (["<table>", f"<tr>{head}</tr>"]
            + [f"<tr>{_cells(r, numeric)}</tr>" for r in rows] + ["</table>"])


def _span(summary, last_ts) -> str:
    first = summary.first_ts_ns
    if first is None or last_ts is None:
        return "-"
    return f"{iso_time(first)} – {iso_time(last_ts)} ({(last_ts - first) / 1e9:.6f} s)"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def html_report(path, findings: list, summary, legend, moments, *, streams=None,
                redacted: bool = False, whole=()) -> str:
    """The page. ``findings`` in report order (their position + 1 is their number and
    anchor ``finding-<n>``), ``legend`` a :class:`~.connections.ConnectionLegend`,
    ``moments`` a :class:`~.moments.MomentCollector` fed with the same pass and told the
    same findings, ``streams`` optional ``(headers, rows)`` of the streams table. The first
    :data:`ROWS_PER_RULE` findings of a rule get a row (of an info rule not in ``whole``, the
    rules asked for by name, :data:`~.findings.INFO_ROWS` when more repeat); the others are
    counted."""
    name = Path(str(path)).name
    rows, detail = _limits(findings, whole)
    per_rule: Counter = Counter()
    numbers = {}                # finding_key -> number, of the findings given a row
    detailed = set()            # the numbers of those shown in detail
    for n, f in enumerate(findings, 1):
        per_rule[f.rule] += 1
        if per_rule[f.rule] <= rows[f.rule]:
            numbers[finding_key(f)] = n
        if per_rule[f.rule] <= detail[f.rule]:
            detailed.add(n)
    figures = _figures(moments, numbers)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>dcpdissect report: {escape(name)}</title>",
           f"<style>{CSS}</style></head><body>",
           f"<h1>dcpdissect report: {escape(name)}</h1>"]
    if redacted:
        out.append('<p class="note">Redacted: document keys are replaced by pseudonyms of '
                   "the same length (equal keys stay equal, distinct keys distinct) and "
                   "values by x bytes of the same length, in the messages, fields and "
                   "hexdumps.</p>")
    out += _counts(findings, summary, moments)
    out.append('<nav>Contents: <a href="#findings">Findings</a> (by rule, then one by one) · '
               '<a href="#details">Findings in detail</a> (fields, filter, hexdump and the '
               "timeline of each finding's moment) · "
               '<a href="#capture">Capture</a> · <a href="#connections">Connections</a> · '
               '<a href="#streams">Streams</a></nav>')
    out += _findings_table(findings, figures, numbers, detailed)
    out += _details(findings, figures, legend, moments, numbers, whole)
    out += _capture(path, findings, summary, moments)
    out += _connections(legend)
    out.append('<h2 id="streams">Streams</h2>')
    if streams is not None:
        headers, stream_rows = streams
        out += (_table(headers, stream_rows) if stream_rows
                else ['<p class="note">No DCP stream.</p>'])
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _figures(moments, numbers) -> dict[int, int]:
    """finding number -> the number of the timeline that shows it, timelines numbered in
    the order the details show them (by severity, rule, then number)."""
    window_of = moments.window_of() if moments is not None else {}
    order: dict[int, int] = {}
    out = {}
    for key, n in sorted(numbers.items(), key=lambda kn: (
            -SEVERITY_RANK[RULES[kn[0][0]].severity], kn[0][0], kn[1])):
        w = window_of.get(key)
        if w is not None:
            out[n] = order.setdefault(id(w), len(order) + 1)
    return out


def _counts(findings, summary, moments) -> list[str]:
    by = Counter(f.severity for f in findings)
    spans = [f'<span class="sev-{s}">{_plural(by[s], s)}</span>'
             for s in ("error", "warning", "info")]
    last = moments.last_ts if moments is not None else None
    return [f'<p class="counts"><b>{_plural(len(findings), "finding")}</b>: '
            + " ".join(spans) + "</p>",
            f'<p class="note">{summary.frames} frames, {summary.pdus} messages, '
            f"{_plural(summary.connections, 'MCBP connection')}, time span "
            f"{escape(_span(summary, last))}</p>"]


def _limits(findings, whole=()) -> tuple[dict, dict]:
    """Per rule, how many findings get a row and how many a detail: an info rule not in
    ``whole`` with more than one finding beyond :data:`~.findings.INFO_ROWS` gives that
    many (as the table and the Markdown fold them)."""
    counts = Counter(f.rule for f in findings)
    folds = {r for r, n in counts.items()
             if RULES[r].severity == INFO and r not in whole and n > INFO_ROWS + 1}
    return ({r: INFO_ROWS if r in folds else ROWS_PER_RULE for r in counts},
            {r: INFO_ROWS if r in folds else MAX_DETAILED for r in counts})


def _findings_table(findings, figures, numbers, detailed) -> list[str]:
    out = ['<h2 id="findings">Findings</h2>']
    if not findings:
        return out + ['<p class="note">No findings.</p>']
    counts = Counter(f.rule for f in findings)
    out += ["<table>", "<tr><th>rule</th><th>severity</th><th>count</th><th>title</th></tr>"]
    for rid in sorted(counts, key=lambda r: (-SEVERITY_RANK[RULES[r].severity], r)):
        sev = RULES[rid].severity
        out.append(f'<tr><td><a href="#rule-{escape(rid)}"><code>{escape(rid)}</code></a></td>'
                   f'<td class="sev-{sev}">{sev}</td><td class="num">{counts[rid]}</td>'
                   f"<td>{escape(RULES[rid].title)}</td></tr>")
    out.append("</table>")
    out += ["<table>", "<tr><th>#</th><th>frame</th><th>time</th><th>conn</th><th>vb</th>"
            "<th>severity</th><th>rule</th><th>message</th><th>timeline</th></tr>"]
    listed = set(numbers.values())
    for number, f in enumerate(findings, 1):
        if number not in listed:
            continue
        target = f"detail-{number}" if number in detailed else f"rule-{escape(f.rule)}"
        cells = (f'<td class="num"><a href="#{target}">{number}</a></td>'
                 + _cells([f.frame if f.frame is not None else "-"], (0,)))
        cells += f'<td class="time">{iso_time(f.ts_ns) if f.ts_ns is not None else "-"}</td>'
        cells += _conn_cell(f.connection)
        cells += _cells([f.vbucket if f.vbucket is not None else "-"], (0,))
        figure = figures.get(number)
        link = f'<a href="#timeline-{figure}">timeline {figure}</a>' if figure else "-"
        out.append(f'<tr id="finding-{number}">{cells}'
                   f'<td class="sev-{escape(f.severity)}">{escape(f.severity)}</td>'
                   f"<td><code>{escape(f.rule)}</code></td>"
                   f"<td>{escape(f.message)}</td>"
                   f"<td>{link}</td></tr>")
    out.append("</table>")
    rows = Counter(f.rule for n, f in enumerate(findings, 1) if n in listed)
    out += [f'<p class="note">{n - rows[rid]} more findings of <a href="#rule-{escape(rid)}">'
            f"<code>{escape(rid)}</code></a> are not listed (their frames are in the rule's "
            "filter; --rule or --format jsonl lists each).</p>"
            for rid, n in counts.items() if n > rows[rid]]
    return out


def _conn_cell(conn) -> str:
    if conn is None:
        return "<td>-</td>"
    return (f'<td class="num"><span class="sw" style="background:{conn_color(conn)}"></span>'
            f"{conn}</td>")


def _details(findings, figures, legend, moments, numbers, whole) -> list[str]:
    out = ['<h2 id="details">Findings in detail</h2>']
    if not findings:
        return out + ['<p class="note">No findings.</p>']
    numbered = sorted(enumerate(findings, 1),
                      key=lambda nf: (-SEVERITY_RANK[nf[1].severity], nf[1].rule, nf[0]))
    groups: dict[str, list] = {}
    for n, f in numbered:
        groups.setdefault(f.rule, []).append((n, f))
    window_of = moments.window_of() if moments is not None else {}
    detail = _limits(findings, whole)[1]
    drawn: set[int] = set()
    for rid, items in groups.items():
        r = RULES[rid]
        every = sorted({fr for _, f in items for fr in finding_frames(f)})
        out += [f'<h3 id="rule-{escape(rid)}"><code>{escape(rid)}</code></h3>',
                f'<p><span class="sev-{r.severity}">{r.severity}</span>: {escape(r.title)}</p>',
                f"<p>Rationale: {escape(r.rationale)}</p>"]
        if every:
            out.append(f"<p>All frames of this rule: <code>{escape(frame_filter(every))}</code>"
                       "</p>")
        listed = set(numbers.values())
        for i, (n, f) in enumerate(items):
            if i == detail[rid]:
                rest = ", ".join(f'<a href="#finding-{k}">#{k}</a>' for k, _ in items[i:]
                                 if k in listed)
                out.append(f'<p class="note">{len(items) - i} more, not detailed'
                           + (f": {rest}" if rest else "") + "</p>")
            figure = figures.get(n)
            if i < detail[rid]:
                out += _detail(n, f, figure, legend)
            if figure is not None and figure not in drawn:    # under its first finding
                drawn.add(figure)
                out += _figure(figure, window_of[finding_key(f)], findings, numbers, legend)
    return out


def _detail(n: int, f, figure, legend) -> list[str]:
    rows = []
    if f.ts_ns is not None:
        rows.append(("time", iso_time(f.ts_ns)))
    if f.connection is not None:
        rows.append(("connection", f"{f.connection} ({legend.label(f.connection)})"))
    if f.vbucket is not None:
        rows.append(("vbucket", f.vbucket))
    if f.opaque is not None:
        rows.append(("opaque", f"{f.opaque:#x}"))
    frames = finding_frames(f)
    if frames:
        rows.append(("frames", ", ".join(map(str, frames))))
    rows += [(k, v) for k, v in f.fields.items()]
    frame = f.frame if f.frame is not None else "-"
    out = [f'<section id="detail-{n}">',
           f'<h4><a href="#finding-{n}">#{n}</a> frame {frame}: {escape(f.message)}</h4>',
           "<table>"]
    out += [f"<tr><th>{escape(str(k))}</th><td>{escape(str(v))}</td></tr>" for k, v in rows]
    out.append("</table>")
    if frames:
        out.append(f"<p>Wireshark filter: <code>{escape(frame_filter(frames))}</code></p>")
    if f.pdu:
        out += [f"<p>PDU (first {min(HEXDUMP_BYTES, len(f.pdu))} of {len(f.pdu)} bytes):</p>",
                f"<pre>{escape(hexdump(f.pdu))}</pre>"]
    if figure is not None:
        out.append(f'<p>Its moment: <a href="#timeline-{figure}">timeline {figure}</a></p>')
    out.append("</section>")
    return out


def _figure(figure: int, window, findings, numbers, legend) -> list[str]:
    """The timeline numbered ``figure``: caption, SVG, key and the table of its events."""
    ts_of = {n: f.ts_ns for n, f in enumerate(findings, 1)}
    server, bucket, vb = window.stream
    shown = sorted({n for f, _ in window.findings
                    if (n := numbers.get(finding_key(f))) is not None})
    links = ", ".join(f'<a href="#finding-{n}">#{n}</a>' for n in shown)
    where = f"vbucket {vb}" + (f" of bucket {bucket}" if bucket else "") + f" on {server}"
    out = [f'<figure id="timeline-{figure}">',
           f"<figcaption>Timeline {figure}: {escape(where)}, around finding {links}"
           "</figcaption>",
           moment_svg(window, numbers, ts_of, f"timeline-{figure}")]
    cols = layout(window, numbers)
    conns = sorted({ev.conn for ev, _ in cols if ev is not None})
    key = [f'<span><span class="sw" style="background:{conn_color(c)}"></span>conn {c}: '
           f"{escape(legend.label(c))}</span>" for c in conns]
    key += ["<span>▶ request (its bar: the snapshot sent)</span>", "<span>○ accepted</span>",
            "<span>▼ rollback</span>", "<span>▯ snapshot marker</span>",
            "<span>● mutation</span>", "<span>× deletion</span>", "<span>■ stream end</span>",
            "<span>★ finding (a link to its row)</span>",
            "<span>seqno upwards, the values shown at equal steps</span>"]
    out.append('<p class="key">' + " ".join(key) + "</p>")
    out += _event_table(cols, ts_of)
    out.append("</figure>")
    return out


def _event_table(cols, ts_of) -> list[str]:
    first = next((nums[0] for _ev, nums in cols if nums), None)
    t0 = ts_of.get(first)
    out = ['<details><summary>the events of this timeline</summary>',
           '<table class="events"><tr><th>column</th><th>frame</th><th>time from the first '
           "finding</th><th>conn</th><th>event</th><th>findings</th></tr>"]
    for i, (ev, nums) in enumerate(cols, 1):
        ts = ev.ts if ev is not None else ts_of.get(nums[0])
        delta = f"{(ts - t0) / 1e3:+,.1f} µs" if ts is not None and t0 is not None else "-"
        hit = ' class="hit"' if nums else ""
        found = ", ".join(f'<a href="#finding-{n}">#{n}</a>' for n in nums)
        if ev is None:
            out.append(f'<tr{hit}><td class="num">{i}</td><td>-</td><td class="time">{delta}'
                       f"</td><td>-</td><td>(not a stream event)</td><td>{found}</td></tr>")
            continue
        out.append(f'<tr{hit}><td class="num">{i}</td><td class="num">{ev.frame}</td>'
                   f'<td class="time num">{delta}</td>{_conn_cell(ev.conn)}'
                   f"<td>{escape(_event_text(ev))}</td><td>{found}</td></tr>")
    out += ["</table>", "</details>"]
    return out


def _event_text(ev) -> str:
    sid = f" sid {ev.sid}" if ev.sid is not None else ""
    if ev.kind == "request":
        return f"stream request{sid}: start {ev.seqno} snap [{ev.low},{ev.high}]"
    if ev.kind == "accepted":
        return f"stream request accepted{sid}"
    if ev.kind == "rollback":
        return f"answer ROLLBACK{sid}: roll back to {ev.seqno}"
    if ev.kind == "refused":
        return f"stream request refused{sid}"
    if ev.kind == "marker":
        return f"snapshot marker{sid} [{ev.low},{ev.high}]"
    if ev.kind == "end":
        return f"stream end{sid}"
    return f"{ev.kind.removeprefix('Dcp')}{sid} seqno {ev.seqno}"


def _capture(path, findings, summary, moments) -> list[str]:
    rows = [*file_rows(path, summary), ("frames", summary.frames),
            ("TCP connections", summary.connections), ("messages", summary.pdus),
            ("time span", _span(summary, moments.last_ts if moments is not None else None)),
            ("gaps", f"{summary.gaps} ({summary.gap_bytes} bytes)"),
            ("findings", len(findings))]
    if summary.not_mcbp:
        rows.insert(len(rows) - 4,        # before messages
                    ("TCP connections not MCBP", f"{summary.not_mcbp} (not decoded)"))
    if summary.error:
        rows.append(("stopped", summary.error))
    out = ['<h2 id="capture">Capture</h2>', "<table>"]
    out += [f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in rows]
    return out + ["</table>"]


def _connections(legend) -> list[str]:
    out = ['<h2 id="connections">Connections</h2>']
    rows = legend.rows()
    if not rows:
        return out + ['<p class="note">No MCBP connection.</p>']
    out += ["<table>", "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in legend.columns())
            + "</tr>"]
    for row in rows:
        out.append(f"<tr>{_conn_cell(row[0])}{_cells(row[1:], (5,))}</tr>")
    return out + ["</table>"]
