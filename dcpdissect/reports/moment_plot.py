"""A finding's moment drawn as inline SVG: the events of its stream (a
:class:`~.moments.Window`) one per column in capture order, so that a request, its
rollback and the re-request stand apart even when they share a microsecond.
Seqnos go upwards at equal steps (an ordinal scale: a rollback to 5 beside items at 1200 stays
readable). Ticks give the time relative to the window's first finding.

Labels are placed, not just drawn: each label tries a few positions around its point and
takes the first whose box stays inside the plot and meets no other label nor point; a label
that fits nowhere is left out (the event table under the plot names every event). The boxes
are computed with :data:`CHAR_WIDTH` for the monospace font the SVG asks for.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from html import escape

from .moments import Event, Window

WIDTH, HEIGHT = 980, 300
LEFT, RIGHT, TOP, BOTTOM = 70, 16, 12, 46
FONT = 11                       # px, monospace
CHAR_WIDTH = 0.62 * FONT        # wider than DejaVu Sans Mono's 0.602 em
ASCENT, DESCENT = 10, 3
COLORS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f",
          "#e377c2")
ROLLBACK_COLOR = "#e06000"
FINDING_COLOR = "#d62728"
OTHERS = 6                      # events shown of connections without a finding, each side
ITEM_GLYPHS = {"DcpMutation": "circle", "DcpDeletion": "cross", "DcpExpiration": "plus"}


def conn_color(conn: int) -> str:
    """The colour of connection ``conn`` in every plot and legend of a report."""
    return COLORS[(conn - 1) % len(COLORS)]


def text_box(x: float, y: float, text: str, anchor: str = "start") -> tuple:
    """(x0, y0, x1, y1) of ``text`` drawn at (x, y) (baseline) with ``anchor``."""
    width = len(text) * CHAR_WIDTH
    x0 = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    return (x0, y - ASCENT, x0 + width, y + DESCENT)


def overlaps(a: tuple, b: tuple) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


class _Canvas:
    def __init__(self):
        self.parts: list[str] = []
        self.taken: list[tuple] = []        # boxes no label may cover

    def text(self, x, y, text, anchor="start", color="#222", weight=None) -> None:
        bold = ' font-weight="bold"' if weight else ""
        self.parts.append(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" '
                          f'fill="{color}"{bold}>{escape(text)}</text>')
        self.taken.append(text_box(x, y, text, anchor))

    def place(self, px, py, text, color, weight=None, inside=None) -> bool:
        """``text`` near the point (px, py) where it meets nothing; False if nowhere."""
        width = len(text) * CHAR_WIDTH
        for dx, dy in ((8, -8), (8, 19), (-8 - width, -8), (-8 - width, 19), (-width / 2, -13),
                       (-width / 2, 24), (8, -22), (8, 33), (-8 - width, -22),
                       (-8 - width, 33), (-width / 2, -36), (-width / 2, 46)):
            box = text_box(px + dx, py + dy, text)
            if inside and not (inside[0] <= box[0] and box[2] <= inside[2]
                               and inside[1] <= box[1] and box[3] <= inside[3]):
                continue
            if not any(overlaps(box, t) for t in self.taken):
                self.text(px + dx, py + dy, text, color=color, weight=weight)
                return True
        return False


def _seqnos(ev: Event) -> list[int]:
    return [v for v in (ev.seqno, ev.low, ev.high) if v is not None]


def _time_text(ns: int) -> str:
    """``+2.0 µs``, ``−3.51 ms``, ``±0``: each tick in the unit that suits it."""
    if ns == 0:
        return "±0"
    sign = "+" if ns > 0 else "−"
    size = abs(ns)
    for name, unit in (("s", 1_000_000_000), ("ms", 1_000_000), ("µs", 1_000)):
        if size >= unit:
            break
    else:
        name, unit = "ns", 1
    value = size / unit
    return f"{sign}{value:.{0 if value >= 100 else 1 if value >= 10 else 2}f} {name}"


def layout(window: Window, numbers: dict) -> list[tuple]:
    """``(event or None, [finding numbers])`` per column, in capture order. ``numbers``:
    :func:`~.moments.finding_key` -> the finding's number in the report (findings not in
    it are left out). Of the connections no finding is on, only the :data:`OTHERS` events
    nearest the first finding on each side are kept."""
    from .moments import finding_key
    on_frame: dict[int, list] = {}
    alone: dict[int, list] = {}
    frames = {e.frame for e in window.events}
    for f, at in window.findings:
        number = numbers.get(finding_key(f))
        if number is None:
            continue
        (on_frame.setdefault(f.frame, []) if f.frame in frames
         else alone.setdefault(at, [])).append(number)
    out: list[tuple] = []
    for i, ev in enumerate(window.events + [None]):
        out += [(None, [number]) for number in alone.get(i, ())]
        if ev is not None:
            out.append((ev, sorted(set(on_frame.pop(ev.frame, ())))))
    focus = {c for f, _ in window.findings
             for c in (f.connection, f.fields.get("previous_connection"))}
    first = next((i for i, (_ev, nums) in enumerate(out) if nums), 0)
    before = [i for i, (ev, _n) in enumerate(out[:first]) if ev and ev.conn not in focus]
    after = [first + i for i, (ev, _n) in enumerate(out[first:]) if ev and ev.conn not in focus]
    dropped = set(before[:-OTHERS]) | set(after[OTHERS:])
    return [col for i, col in enumerate(out) if i not in dropped]


def moment_svg(window: Window, numbers: dict, ts_of: dict, figure_id: str) -> str:
    """The SVG of ``window``; ``numbers`` as :func:`layout`; ``ts_of``: finding number ->
    its time (ns); ``figure_id``: the id prefix of its elements."""
    cols = layout(window, numbers)
    n = max(len(cols), 1)
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = pw / n
    values = sorted({v for ev, _ in cols if ev is not None for v in _seqnos(ev)} or {0})
    hi = values[-1]
    pad, pad_top = 22, 32       # room above the highest point for a finding's star
    rung = (ph - pad - pad_top) / max(len(values) - 1, 1)

    def y(v):           # ordinal: the seqnos shown at equal steps, in order
        i = bisect_left(values, v)
        if i < len(values) and values[i] == v or i == 0:
            rank = float(i)
        elif i == len(values):
            rank = len(values) - 1.0
        else:
            lo_v, hi_v = values[i - 1], values[i]
            rank = i - 1 + (v - lo_v) / (hi_v - lo_v)
        return TOP + ph - pad - rank * rung if len(values) > 1 else TOP + ph / 2

    def x(i):
        return LEFT + (i + 0.5) * step

    c = _Canvas()
    body = c.parts
    plot_box = (LEFT, TOP, LEFT + pw, TOP + ph)
    body.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="#fff" '
                'stroke="#888"/>')
    last_tick = None
    for t in values:
        ty = y(t)
        body.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{ty:.1f}" y2="{ty:.1f}" '
                    'stroke="#eee"/>')
        if last_tick is None or last_tick - ty >= ASCENT + DESCENT + 2:
            text = str(t) if len(str(t)) * CHAR_WIDTH <= LEFT - 8 else f"{t:.2g}"
            c.text(LEFT - 6, ty + 4, text, anchor="end", color="#444")
            last_tick = ty
    c.taken.clear()             # tick labels sit outside the plot: they meet no label there
    half = min(step * 0.3, 7)
    ys = _column_ys(cols, y, TOP + pad_top, hi)
    stars = []
    for i, (ev, nums) in enumerate(cols):
        px, py = x(i), ys[i]
        if ev is not None:
            body.append(f'<g data-conn="{ev.conn}" data-frame="{ev.frame}" '
                        f'color="{conn_color(ev.conn)}">' + _glyph(ev, px, py, y, half)
                        + "</g>")
            spans = [py] + [y(v) for v in (ev.low, ev.high) if v is not None]
            c.taken.append((px - half - 2, min(spans) - 6, px + half + 2, max(spans) + 6))
        if nums:
            sy = py - 15 if ev is not None else py
            stars.append((px, sy, nums))
            c.taken.append((px - 9, sy - 9, px + 9, sy + 9))
    group = [f'<g id="findings-{escape(figure_id)}">']
    for px, py, nums in stars:
        group.append(f'<a href="#finding-{nums[0]}"><title>finding '
                     + ", ".join(f"#{k}" for k in nums) + f"</title>{_star(px, py)}</a>")
    group.append("</g>")
    body += group
    labels = []
    star_y = {i: sy for i, (_px, sy, _n) in zip((i for i, (_e, n) in enumerate(cols) if n),
                                                 stars)}
    for i, (ev, nums) in enumerate(cols):
        if nums:
            labels.append((0, i, " ".join(f"#{k}" for k in nums), FINDING_COLOR, "bold"))
        if ev is None:
            continue
        rank, text = _label(ev)
        if text:
            color = ROLLBACK_COLOR if ev.kind in ("rollback", "refused") else conn_color(ev.conn)
            labels.append((rank, i, text, color, None))
    for rank, i, text, color, weight in sorted(labels, key=lambda t: (t[0], t[1])):
        c.place(x(i), star_y[i] if rank == 0 else ys[i], text, color, weight, inside=plot_box)
    _time_ticks(c, cols, x, ts_of)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'width="{WIDTH}" height="{HEIGHT}" font-family="DejaVu Sans Mono, monospace" '
            f'font-size="{FONT}" role="img">' + "".join(body) + "</svg>")


def _column_ys(cols, y, top, hi) -> list[float]:
    """The y of each column's point: a stream end at its stream's last seqno, a marker at
    its snapshot's end, a finding of its own at the top."""
    out, last = [], {}
    for ev, _nums in cols:
        if ev is None:
            out.append(top)
        elif ev.kind == "end":
            out.append(y(last.get((ev.conn, ev.sid), hi)))
        elif ev.kind == "marker":
            out.append(y(ev.high))
        else:
            out.append(y(ev.seqno))
        if ev is not None and ev.seqno is not None and ev.kind not in ("request", "accepted",
                                                                     "refused"):
            last[(ev.conn, ev.sid)] = ev.seqno
    return out


def _label(ev: Event) -> tuple[int, str]:
    """(priority, text) of an event's label; lower priority is placed first."""
    if ev.kind == "rollback":
        return 1, f"rollback to {ev.seqno}"
    if ev.kind == "refused":
        return 1, "refused"
    if ev.kind == "request":
        return 2, f"req {ev.seqno} snap [{ev.low},{ev.high}]"
    if ev.kind == "end":
        return 3, "end"
    if ev.kind == "marker":
        return 4, f"[{ev.low},{ev.high}]"
    return 9, ""


def _glyph(ev: Event, px, py, y, half) -> str:
    """The point of one event, in ``currentColor`` (its connection's) but a rollback's."""
    k = ev.kind
    if k == "marker":
        top, bottom = y(ev.high), y(ev.low)
        return (f'<rect x="{px - half:.1f}" y="{top - 3:.1f}" width="{2 * half:.1f}" '
                f'height="{bottom - top + 6:.1f}" fill="currentColor" fill-opacity="0.22" '
                f'stroke="currentColor"/>')
    if k == "request":
        bar = (f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{y(ev.high) - 3:.1f}" '
               f'y2="{y(ev.low) + 3:.1f}" stroke="currentColor" stroke-width="3" '
               'stroke-opacity="0.6"/>')
        return bar + (f'<path d="M{px - 5:.1f},{py - 6:.1f}L{px + 6:.1f},{py:.1f}'
                      f'L{px - 5:.1f},{py + 6:.1f}Z" fill="currentColor" stroke="#000"/>')
    if k == "rollback":
        return (f'<path d="M{px - 6:.1f},{py - 5:.1f}L{px + 6:.1f},{py - 5:.1f}'
                f'L{px:.1f},{py + 6:.1f}Z" fill="{ROLLBACK_COLOR}" stroke="#000"/>')
    if k == "refused":
        return (f'<path d="M{px - 5:.1f},{py - 5:.1f}L{px + 5:.1f},{py + 5:.1f}'
                f'M{px - 5:.1f},{py + 5:.1f}L{px + 5:.1f},{py - 5:.1f}" '
                f'stroke="{ROLLBACK_COLOR}" stroke-width="2.5"/>')
    if k == "accepted":
        return (f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="#fff" stroke="currentColor" '
                'stroke-width="2"/>')
    if k == "end":
        return (f'<rect x="{px - 4:.1f}" y="{py - 4:.1f}" width="8" height="8" '
                'fill="#000"/>')
    shape = ITEM_GLYPHS.get(k)
    if shape == "cross":
        return (f'<path d="M{px - 4:.1f},{py - 4:.1f}L{px + 4:.1f},{py + 4:.1f}'
                f'M{px - 4:.1f},{py + 4:.1f}L{px + 4:.1f},{py - 4:.1f}" stroke="currentColor" '
                'stroke-width="2"/>')
    if shape == "plus":
        return (f'<path d="M{px - 5:.1f},{py:.1f}H{px + 5:.1f}M{px:.1f},{py - 5:.1f}'
                f'V{py + 5:.1f}" stroke="currentColor" stroke-width="2"/>')
    if shape == "circle":
        return f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="currentColor"/>'
    return (f'<path d="M{px:.1f},{py - 5:.1f}L{px + 5:.1f},{py:.1f}L{px:.1f},{py + 5:.1f}'
            f'L{px - 5:.1f},{py:.1f}Z" fill="currentColor"/>')


def _star(px, py) -> str:
    points = []
    for k in range(10):
        r = 9 if k % 2 == 0 else 4
        a = -math.pi / 2 + k * math.pi / 5
        points.append(f"{px + r * math.cos(a):.1f},{py + r * math.sin(a):.1f}")
    return (f'<polygon points="{" ".join(points)}" fill="{FINDING_COLOR}" stroke="#000" '
            'stroke-width="0.6"/>')


def _time_ticks(c: _Canvas, cols, x, ts_of: dict) -> None:
    """Ticks under the plot: time relative to the first finding's, where they fit."""
    times = [ev.ts if ev is not None else ts_of.get(nums[0]) for ev, nums in cols]
    first = next((i for i, (_ev, nums) in enumerate(cols) if nums), 0)
    t0 = times[first] if times and times[first] is not None else 0
    base = HEIGHT - BOTTOM + 16
    c.taken = []
    order = [first] + [i for i in range(len(cols)) if i != first]
    shown, seen = [], set()
    for i in order:
        if times[i] is None:
            continue
        text = _time_text(times[i] - t0)
        if text in seen:
            continue
        box = text_box(x(i), base, text, "middle")
        if box[0] < 0 or box[2] > WIDTH or any(overlaps(box, (t[0] - 8, t[1], t[2] + 8, t[3]))
                                                for t in c.taken):
            continue
        c.text(x(i), base, text, anchor="middle", color="#444")
        shown.append(i)
        seen.add(text)
    for i in shown:
        c.parts.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{HEIGHT - BOTTOM}" '
                       f'y2="{HEIGHT - BOTTOM + 4}" stroke="#888"/>')
    c.text(LEFT, HEIGHT - 6, "one column per message, in capture order; time relative to "
           "the first finding", color="#666")


def write_moments(directory: str, moments, findings: list) -> list[str]:
    """``moment-finding-<n>.svg`` into ``directory`` for every timeline of a finding's
    moment, ``n`` the number of its first finding in report order."""
    import os

    from .moments import finding_key
    numbers = {finding_key(f): n for n, f in enumerate(findings, 1)}
    ts_of = {n: f.ts_ns for n, f in enumerate(findings, 1)}
    os.makedirs(directory, exist_ok=True)
    written = []
    for w in moments.windows:
        shown = sorted(n for f, _ in w.findings if (n := numbers.get(finding_key(f))))
        if not shown:
            continue
        path = os.path.join(directory, f"moment-finding-{shown[0]}.svg")
        with open(path, "w", encoding="utf-8") as out:
            out.write(moment_svg(w, numbers, ts_of, f"moment-{shown[0]}") + "\n")
        written.append(path)
    return written
