"""Two capture points on one self-contained HTML page (``dcpdissect nodes --format html``):
the findings first with counts by severity, each with its rule and the frames and a
Wireshark filter at each point; the points, connections, clock offset and lag per vbucket;
then one timeline per DCP stream (a paired connection and a vbucket) with a lane per point.
More than two points: the points' clock offsets, then each pair of points so (a timeline
per pair of points and stream, two lanes each).

In a timeline each message is drawn in its point's lane at its time, B's moved into A's
clock by the offset: every send and receive has a column of its own, in time order (messages
of one frame share a microsecond), the time under it. A line joins a message's send at one
point to its receive at the other, so the lag is the line's slant, and a message sent that
the other point never saw is drawn as a cross with no line. A finding's star stands by its
message and links to the finding's row. At most :data:`MAX_MESSAGES` messages are drawn per
timeline (around its findings, else its first ones); the others are counted. The labels
are placed as :mod:`.moment_plot` places them (never overlapping)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from html import escape

from ..analysis.nodes import C2S, S2C, Message, NodesReport, Pairing, PointsReport, upstream
from ..analysis.rules import RULES, SEVERITY_RANK
from ..protocol import OPCODE_NAMES, STREAM_OPCODES, opcode_code
from .html import CSS, _cells, _plural, _table
from .markdown import frame_filter
from .moment_plot import COLORS, FINDING_COLOR, FONT, _Canvas, _star, overlaps, text_box
from .nodes import (LAG_HEADERS, NO_CONNECTION, lag_rows, offset_lines, offset_text, pair_lines,
                    point_frames)

MAX_MESSAGES = 40           # messages drawn per timeline
AROUND = 8                  # messages drawn each side of a finding's
WIDTH, HEIGHT = 980, 210
LEFT, RIGHT, TOP, BOTTOM = 110, 16, 30, 40
LANES = (TOP + 45, HEIGHT - BOTTOM - 35)    # the y of A's lane and of B's
STREAM_ANSWERED = STREAM_OPCODES | {opcode_code("DcpStreamReq")}    # known by their opaque


def point_color(side: str) -> str:
    """The colour of point A or B in every timeline and key of the page."""
    return COLORS[0] if side == "a" else COLORS[2]


@dataclass
class Crossing:
    """One message of a stream: its send at ``up`` and, when the other point saw it, its
    receive there; times in A's clock."""
    up: str
    sent: Message
    sent_ts: int
    received: Message | None = None
    received_ts: int | None = None


def _stream_vbuckets(p: Pairing) -> dict[int, int]:
    """opaque -> vbucket of the producer's stream messages of a pairing: the stream's
    request, its answer and the consumer's answers to the stream's messages carry it."""
    return {m.opaque: m.vbucket for conn in (p.a, p.b) for m in conn.messages[S2C]
            if m.vbucket is not None}


def crossings(r: NodesReport) -> dict[tuple[int, int], list[Crossing]]:
    """(pairing index, vbucket) -> its messages in send order, of every pairing whose
    bound decided which point sends which direction."""
    theta = r.offset.estimate
    out: dict[tuple[int, int], list[Crossing]] = {}
    for k, bound in r.bounds.items():
        p = r.pairings[k]
        vb_of = _stream_vbuckets(p)
        for d in (C2S, S2C):
            up = upstream(bound, d)
            sender, receiver = (p.a, p.b) if up == "a" else (p.b, p.a)
            shift_s, shift_r = (0, theta) if up == "a" else (theta, 0)
            got = dict(pair if up == "a" else pair[::-1] for pair in p.matched[d])
            for i, m in enumerate(sender.messages[d]):
                vb = m.vbucket if m.vbucket is not None else (
                    vb_of.get(m.opaque) if m.opcode in STREAM_ANSWERED else None)
                if vb is None:
                    continue
                c = Crossing(up, m, m.ts_ns - shift_s)
                if i in got:
                    c.received = receiver.messages[d][got[i]]
                    c.received_ts = c.received.ts_ns - shift_r
                out.setdefault((k, vb), []).append(c)
    for items in out.values():
        items.sort(key=lambda c: c.sent_ts)
    return out


def _chosen(items: list[Crossing], hits: set[int]) -> list[int]:
    """The indexes drawn: :data:`AROUND` each side of each finding's message, else the
    first :data:`MAX_MESSAGES`; never more than that."""
    if not hits:
        return list(range(min(len(items), MAX_MESSAGES)))
    keep = sorted({j for i in hits for j in range(max(i - AROUND, 0),
                                                 min(i + AROUND + 1, len(items)))})
    return keep[:MAX_MESSAGES]


def _what(m: Message) -> str:
    name = OPCODE_NAMES.get(m.opcode, f"opcode 0x{m.opcode:02x}")
    name = name.removeprefix("Dcp") + ("" if m.request else " response")
    return name + (f" {m.seqno}" if m.seqno is not None else "")


def nodes_html(r: NodesReport) -> str:
    """The page."""
    title = f"dcpdissect nodes: {r.a.name} and {r.b.name}"
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{escape(title)}</title>", f"<style>{CSS}</style></head><body>",
           f"<h1>{escape(title)}</h1>", *_pair_body(r),
           "</body></html>"]
    return "\n".join(out) + "\n"


def points_html(m: PointsReport) -> str:
    """The page of more than two points: the points with their offsets from the first,
    then each pair's findings, connections, offset, lag and timelines (one per stream of
    the pair, a lane per point of the pair)."""
    title = "dcpdissect nodes: " + ", ".join(pt.name for pt in m.points)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{escape(title)}</title>", f"<style>{CSS}</style></head><body>",
           f"<h1>{escape(title)}</h1>", '<h2 id="offsets">Clock offsets</h2>', "<ul>"]
    out += [f"<li>{escape(line)}</li>" for line in offset_lines(m)] + ["</ul>"]
    for k, r in enumerate(m.pairs, 1):
        out.append(f'<h1 id="pair-{k}">{escape(r.a.name)} and {escape(r.b.name)}</h1>')
        if not r.pairings:
            out.append(f'<p class="note">{escape(NO_CONNECTION)}</p>')
            continue
        # each pair's ids and the links to them prefixed, so that they stay unique
        out += [line.replace(' id="', f' id="pair-{k}-').replace(' href="#', f' href="#pair-{k}-')
                for line in _pair_body(r)]
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _pair_body(r: NodesReport) -> list[str]:
    """A pair's findings, points, connections, offset, lag and timelines."""
    numbers = {id(f): n for n, f in enumerate(r.findings, 1)}
    streams = crossings(r) if r.offset is not None else {}
    figures = {}        # finding number -> timeline number
    for t, ((k, vb), items) in enumerate(sorted(streams.items()), 1):
        for f in r.findings:
            if any(_is_finding(r, k, c, f) for c in items):
                figures[numbers[id(f)]] = t
    out = _findings(r, figures)
    out += ['<h2 id="points">Points</h2>']
    out += _table(("", "point", "capture", "frames", "messages"),
                  [(side, pt.name, pt.path, pt.summary.frames, pt.summary.pdus)
                   for side, pt in (("A", r.a), ("B", r.b))], (3, 4))
    out += ['<h2 id="connections">Connections</h2>', "<ul>"]
    out += [f"<li>{escape(line)}</li>" for line in pair_lines(r)] + ["</ul>"]
    out += ['<h2 id="offset">Clock offset</h2>', f"<p>{escape(offset_text(r))}</p>"]
    if r.lags:
        out += ['<h2 id="lag">Replication lag per vbucket</h2>',
                '<p class="note">Producer send -> consumer receive, offset-corrected, ms.</p>']
        out += _table(LAG_HEADERS, lag_rows(r), (0, 1, 2, 3, 4))
    out.append('<h2 id="timelines">Timelines</h2>')
    if not streams:
        out.append('<p class="note">No timeline: without a clock offset the two points\' '
                   "times cannot be drawn on one axis.</p>")
    for t, ((k, vb), items) in enumerate(sorted(streams.items()), 1):
        out += _figure(t, r, k, vb, items, numbers)
    return out


def _is_finding(r: NodesReport, k: int, c: Crossing, f) -> bool:
    """Whether ``c`` is the message finding ``f`` reports lost."""
    return (c.received is None and c.sent.frame == f.frame
            and c.sent.opcode == f.fields["opcode"]
            and getattr(r.pairings[k], c.up).conn == f.connection)


def _findings(r: NodesReport, figures: dict[int, int]) -> list[str]:
    by = Counter(f.severity for f in r.findings)
    spans = [f'<span class="sev-{s}">{_plural(by[s], s)}</span>'
             for s in ("error", "warning", "info")]
    out = [f'<p class="counts"><b>{_plural(len(r.findings), "finding")}</b>: '
           + " ".join(spans) + "</p>",
           '<nav>Contents: <a href="#findings">Findings</a> · <a href="#points">Points</a> · '
           '<a href="#offset">Clock offset</a> · <a href="#lag">Lag</a> · '
           '<a href="#timelines">Timelines</a> (one per stream, a lane per point)</nav>',
           '<h2 id="findings">Findings</h2>']
    if r.offset is None:
        return out + ['<p class="note">Losses not judged: without a clock offset the direction '
                      "of travel between the points is not known.</p>"]
    if not r.findings:
        return out + ['<p class="note">No message lost between the points.</p>']
    for rid in sorted({f.rule for f in r.findings},
                      key=lambda rid: (-SEVERITY_RANK[RULES[rid].severity], rid)):
        rule = RULES[rid]
        out += [f'<h3 id="rule-{escape(rid)}"><code>{escape(rid)}</code></h3>',
                f'<p><span class="sev-{rule.severity}">{rule.severity}</span>: '
                f"{escape(rule.title)}</p>", f"<p>Rationale: {escape(rule.rationale)}</p>"]
    out += ["<table>", "<tr><th>#</th><th>rule</th><th>severity</th><th>vb</th><th>message</th>"
            "<th>frames at each point (Wireshark filter)</th><th>timeline</th></tr>"]
    for n, f in enumerate(r.findings, 1):
        at = "<br>".join(f"{escape(point)}: <code>{escape(frame_filter(frames))}</code>"
                         for point, frames in point_frames(f))
        t = figures.get(n)
        link = f'<a href="#timeline-{t}">timeline {t}</a>' if t else "-"
        out.append(f'<tr id="finding-{n}"><td class="num">{n}</td>'
                   f'<td><a href="#rule-{escape(f.rule)}"><code>{escape(f.rule)}</code></a></td>'
                   f'<td class="sev-{escape(f.severity)}">{escape(f.severity)}</td>'
                   + _cells([f.vbucket if f.vbucket is not None else "-"], (0,))
                   + f"<td>{escape(f.message)}</td><td>{at}</td><td>{link}</td></tr>")
    return out + ["</table>"]


def _figure(t: int, r: NodesReport, k: int, vb: int, items: list[Crossing],
            numbers: dict) -> list[str]:
    p = r.pairings[k]
    stars = {}          # index in items -> finding numbers
    for f in r.findings:
        for i, c in enumerate(items):
            if _is_finding(r, k, c, f):
                stars.setdefault(i, []).append(numbers[id(f)])
    shown = _chosen(items, set(stars))
    lost = sum(1 for c in items if c.received is None)
    where = (f"vbucket {vb} of {r.a.name} conn {p.a.conn} = {r.b.name} conn {p.b.conn}")
    links = ", ".join(f'<a href="#finding-{n}">#{n}</a>' for ns in stars.values() for n in ns)
    out = [f'<figure id="timeline-{t}">',
           f"<figcaption>Timeline {t}: {escape(where)}"
           + (f", finding {links}" if links else "") + "</figcaption>",
           timeline_svg(t, r, [items[i] for i in shown],
                        {shown.index(i): ns for i, ns in stars.items() if i in shown})]
    key = [f'<span><span class="sw" style="background:{point_color(s)}"></span>'
           f"{escape(pt.name)}</span>" for s, pt in (("a", r.a), ("b", r.b))]
    key += ["<span>● a message at the point that saw it</span>",
            "<span>— its send joined to its receive</span>",
            "<span>× sent, never seen at the other point</span>",
            "<span>★ finding (a link to its row)</span>"]
    out.append('<p class="key">' + " ".join(key) + "</p>")
    rest = len(items) - len(shown)
    out.append(f'<p class="note">{len(shown)} of {_plural(len(items), "message")} drawn'
               + (f" ({rest} not drawn)" if rest else "") + f"; {lost} never seen at the "
               "other point.</p>")
    rows = []
    for i in shown:
        c = items[i]
        down = "b" if c.up == "a" else "a"
        rows.append((c.sent.frame if c.up == "a" else "-", c.sent.frame if c.up == "b" else "-",
                     _what(c.sent), getattr(r, c.up).name,
                     "-" if c.received is None else c.received.frame,
                     "never seen at " + getattr(r, down).name if c.received is None
                     else f"{(c.received_ts - c.sent_ts) / 1e6:.3f}"))
    out += ["<details><summary>the messages of this timeline</summary>"]
    out += _table(("frame at " + r.a.name, "frame at " + r.b.name, "message", "sent at",
                   "received at frame", "lag ms"), rows, (0, 1, 4))
    return out + ["</details>", "</figure>"]


def timeline_svg(t: int, r: NodesReport, items: list[Crossing], stars: dict) -> str:
    """The SVG of one stream's messages ``items``; ``stars``: index -> finding numbers."""
    ends = sorted([(c.sent_ts, c.up == "b", i, "s") for i, c in enumerate(items)]
                  + [(c.received_ts, c.up == "a", i, "r") for i, c in enumerate(items)
                     if c.received is not None])
    column = {(i, end): n for n, (_ts, _lane, i, end) in enumerate(ends)}
    step = (WIDTH - LEFT - RIGHT - 20) / max(len(ends), 1)
    pw = WIDTH - LEFT - RIGHT

    def x(i, end="s"):
        return LEFT + 10 + (column[(i, end)] + 0.5) * step

    lane = {"a": LANES[0], "b": LANES[1]}
    c = _Canvas()
    body = c.parts
    plot = (LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)
    body.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{HEIGHT - TOP - BOTTOM}" '
                'fill="#fff" stroke="#888"/>')
    for side, pt in (("a", r.a), ("b", r.b)):
        body.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{lane[side]}" '
                    f'y2="{lane[side]}" stroke="{point_color(side)}" stroke-opacity="0.35"/>')
        name = pt.name if len(pt.name) <= 15 else pt.name[:14] + "…"
        c.text(LEFT - 6, lane[side] + 4, name, anchor="end", color=point_color(side))
    c.taken.clear()
    marks, labels = [], []
    for i, m in enumerate(items):
        sx, sy = x(i), lane[m.up]
        down = "b" if m.up == "a" else "a"
        if m.received is not None:
            rx, ry = x(i, "r"), lane[down]
            body.append(f'<line x1="{sx:.1f}" y1="{sy}" x2="{rx:.1f}" y2="{ry}" '
                        f'stroke="{point_color(m.up)}" stroke-opacity="0.5"/>')
            marks.append(f'<circle data-point="{down}" data-frame="{m.received.frame}" '
                         f'cx="{rx:.1f}" cy="{ry}" r="3.5" fill="{point_color(down)}"/>')
            c.taken.append((rx - 4, ry - 4, rx + 4, ry + 4))
        marks.append(f'<circle data-point="{m.up}" data-frame="{m.sent.frame}" cx="{sx:.1f}" '
                     f'cy="{sy}" r="3.5" fill="{point_color(m.up)}"/>')
        c.taken.append((sx - 4, sy - 4, sx + 4, sy + 4))
        if m.received is None:
            my = (sy + lane[down]) / 2
            marks.append(f'<path data-unmatched="{m.up}" data-frame="{m.sent.frame}" '
                         f'd="M{sx - 6:.1f},{my - 6:.1f}L{sx + 6:.1f},{my + 6:.1f}'
                         f'M{sx - 6:.1f},{my + 6:.1f}L{sx + 6:.1f},{my - 6:.1f}" '
                         f'stroke="{FINDING_COLOR}" stroke-width="2.5"/>')
            c.taken.append((sx - 7, my - 7, sx + 7, my + 7))
            labels.append((1, sx, my, f"{_what(m.sent)} lost", FINDING_COLOR))
        elif m.sent.seqno is not None:
            labels.append((3, sx, sy, str(m.sent.seqno), point_color(m.up)))
    body += marks
    group = [f'<g id="findings-timeline-{t}">']
    for i, nums in sorted(stars.items()):
        sx, sy = x(i), lane[items[i].up] + (-16 if items[i].up == "a" else 16)
        group.append(f'<a href="#finding-{nums[0]}"><title>finding '
                     + ", ".join(f"#{n}" for n in nums) + f"</title>{_star(sx, sy)}</a>")
        c.taken.append((sx - 9, sy - 9, sx + 9, sy + 9))
        labels.append((0, sx, sy, " ".join(f"#{n}" for n in nums), FINDING_COLOR))
    body += group + ["</g>"]
    for rank, lx, ly, text, color in sorted(labels, key=lambda v: (v[0], v[1])):
        c.place(lx, ly, text, color, "bold" if rank < 2 else None, inside=plot)
    _ticks(c, ends, [x(i, end) for _ts, _lane, i, end in ends])
    c.text(LEFT, HEIGHT - 6, f"each send and receive in time order, in {r.a.name}'s clock "
           f"({r.b.name}'s moved by the offset); time from the first; labels: seqnos",
           color="#666")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'width="{WIDTH}" height="{HEIGHT}" font-family="DejaVu Sans Mono, monospace" '
            f'font-size="{FONT}" role="img">' + "".join(body) + "</svg>")


def _ticks(c: _Canvas, ends: list, xs: list[float]) -> None:
    """Ticks under the plot: the time from the first message, where they fit."""
    c.taken = []
    base = HEIGHT - BOTTOM + 16
    t0 = ends[0][0] if ends else 0
    seen = set()
    for (ts, *_rest), px in zip(ends, xs):
        text = f"{(ts - t0) / 1e6:.3f} ms"
        box = text_box(px, base, text, "middle")
        if text in seen or box[0] < 0 or box[2] > WIDTH or any(
                overlaps(box, (t[0] - 10, t[1], t[2] + 10, t[3])) for t in c.taken):
            continue
        c.text(px, base, text, anchor="middle", color="#444")
        seen.add(text)
        c.parts.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{HEIGHT - BOTTOM}" '
                       f'y2="{HEIGHT - BOTTOM + 4}" stroke="#888"/>')
