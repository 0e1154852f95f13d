"""What the timeline plots show: per vbucket, its streams' requests, answers, snapshots,
items and the capture's gaps, collected while the capture's events go by.

Fed with the decoded messages of a pass; the seqno of an item is the
field its opcode's table names (``seqno_field``), as the snapshot rules read it. Memory is
bounded: a lane keeps at most :data:`MAX_POINTS` items and as many snapshots, every other
one dropped (and the rate halved) when full; requests, answers and ends are all kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..protocol import STATUS_ROLLBACK, STREAM_OPCODES, opcode_code
from ..reassembly.connections import StreamGap
from ..reassembly.tcp import LOST
from ..reassembly.framing import Resync
from .moment_plot import conn_color

STREAM_REQUEST = opcode_code("DcpStreamReq")
MARKER = opcode_code("DcpSnapshotMarker")
STREAM_END = opcode_code("DcpStreamEnd")
_WATCHED = STREAM_OPCODES | {STREAM_REQUEST}
MAX_POINTS = 2000


class Sampled(list):
    """A list that keeps at most ``MAX_POINTS`` of the values offered, evenly spread."""

    def __init__(self):
        super().__init__()
        self.stride, self.offered = 1, 0

    def offer(self, value) -> None:
        self.offered += 1
        if (self.offered - 1) % self.stride:
            return
        if len(self) >= MAX_POINTS:
            del self[1::2]
            self.stride *= 2
        self.append(value)


@dataclass
class Lane:
    """One stream of one connection: ``(conn, vbucket, stream id)``. Times are ns."""
    conn: int
    vb: int
    sid: int | None
    items: Sampled = field(default_factory=Sampled)       # (ts, seqno, opcode name, frame)
    snapshots: Sampled = field(default_factory=Sampled)   # (ts, start, end, frame)
    requests: list = field(default_factory=list)    # (ts, start, snap_start, snap_end, frame)
    rollbacks: list = field(default_factory=list)   # (ts, rollback seqno, frame)
    ends: list = field(default_factory=list)        # (ts, frame)
    last_ts: int = 0

    @property
    def name(self) -> str:
        return f"conn {self.conn}" + (f" sid {self.sid}" if self.sid is not None else "")


class TimelineCollector:
    """An observer of a :class:`~dcpdissect.analysis.session.Pass` over the capture;
    :meth:`vbuckets` groups the lanes."""

    def __init__(self):
        self.lanes: dict[tuple, Lane] = {}
        self.asked: dict[tuple, Lane] = {}          # (conn, opaque) -> lane of a request
        self.gaps: dict[int, list] = {}             # conn -> [(ts, frame, what)]
        self.first_ts = self.last_ts = None

    def _lane(self, conn: int, vb: int, sid) -> Lane:
        key = (conn, vb, sid)
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = Lane(conn, vb, sid)
        return lane

    def _time(self, ts: int | None) -> None:
        if ts is not None:
            self.first_ts = ts if self.first_ts is None else min(self.first_ts, ts)
            self.last_ts = ts if self.last_ts is None else max(self.last_ts, ts)

    def on_message(self, pdu, msg) -> None:
        self._time(pdu.ts_ns)
        if msg.opcode in _WATCHED:
            self._message(pdu, msg)

    def on_event(self, ev) -> None:
        self._time(getattr(ev, "ts_ns", None))
        kind = type(ev)
        if kind is StreamGap and ev.cause == LOST or kind is Resync and ev.reason == "garbage":
            what = (f"{ev.length} bytes missing" if kind is StreamGap
                    else f"{ev.skipped} bytes skipped")
            self.gaps.setdefault(ev.conn, []).append((ev.ts_ns, ev.frame, what))

    def _message(self, pdu, msg) -> None:
        f, ts = msg.fields, pdu.ts_ns
        if not msg.is_request:
            lane = self.asked.pop((pdu.conn, msg.opaque), None)
            if lane is not None and msg.opcode == STREAM_REQUEST:
                lane.last_ts = ts
                if msg.status == STATUS_ROLLBACK and "rollback_seqno" in f:
                    lane.rollbacks.append((ts, f["rollback_seqno"], pdu.frame))
            return
        lane = self._lane(pdu.conn, msg.vbucket, msg.stream_id)
        lane.last_ts = ts
        if msg.opcode == STREAM_REQUEST:
            if "start_seqno" in f:
                lane.requests.append((ts, f["start_seqno"], f["snap_start_seqno"],
                                      f["snap_end_seqno"], pdu.frame))
            self.asked[(pdu.conn, msg.opaque)] = lane
        elif msg.opcode == MARKER and "start_seqno" in f:
            lane.snapshots.offer((ts, f["start_seqno"], f["end_seqno"], pdu.frame))
        elif msg.opcode == STREAM_END:
            lane.ends.append((ts, pdu.frame))
        else:
            seqno_field = msg.spec.seqno_field if msg.spec else None
            if seqno_field and seqno_field in f:
                lane.items.offer((ts, f[seqno_field], msg.name, pdu.frame))

    def lanes_conns(self) -> set[int]:
        return {conn for conn, _vb, _sid in self.lanes}

    def vbuckets(self, bucket_of=lambda conn: None) -> dict[tuple, list[Lane]]:
        """(label, vbucket) -> its lanes (by connection and stream id), only those that
        show data or a request; ``bucket_of(conn)`` labels a connection: its bucket, or
        its server and bucket (None: not known)."""
        out: dict[tuple, list[Lane]] = {}
        for key in sorted(self.lanes, key=lambda k: (k[1], k[0], k[2] or 0)):
            lane = self.lanes[key]
            if lane.items or lane.snapshots or lane.requests:
                out.setdefault((bucket_of(lane.conn), lane.vb), []).append(lane)
        return dict(sorted(out.items(), key=lambda kv: (kv[0][0] or "", kv[0][1])))


# --- plots ----------------------------------------------------------------------------------

ITEM_MARKERS = {"DcpMutation": "o", "DcpDeletion": "x", "DcpExpiration": "+",
                "DcpPrepare": "s", "DcpCommit": "D", "DcpAbort": "v",
                "DcpSeqnoAdvanced": ">", "DcpSystemEvent": "P"}
FINDING_COLOR = "#d62728"
SNAPSHOT_LABELS = 12    # snapshot ranges are labelled on a lane with at most this many


def finding_anchor(number: int) -> str:
    """The id of a finding's row in the HTML report (1-based, in report order)."""
    return f"finding-{number}"


def plot_name(where: tuple) -> str:
    """``vb<N>``, or ``<label>-vb<N>`` (the label of :func:`timelines` in file-name-safe
    characters)."""
    bucket, vb = where
    return (re.sub(r"[^A-Za-z0-9._-]", "_", bucket) + "-" if bucket else "") + f"vb{vb}"


def plot_vbucket(where: tuple, lanes: list[Lane], collector: TimelineCollector,
                 findings: list[tuple[int, object]], labels: dict[int, str]):
    """The timeline of one vbucket as a matplotlib Figure: seqno against time since the
    capture's first frame (ms; s when the capture is longer than 10 s); the colour of a
    connection is its colour in every plot (:func:`~.moment_plot.conn_color`).
    ``findings`` are ``(number, Finding)`` of this vbucket; each is a star linked to
    ``#finding-<number>``. ``labels`` name the connections."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    t0 = collector.first_ts or 0
    unit, scale = ("s", 1e9) if (collector.last_ts or t0) - t0 > 10e9 else ("ms", 1e6)
    span = max(((collector.last_ts or t0) - t0) / scale, 1e-3)

    def ms(ts):
        return (ts - t0) / scale

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax = fig.add_subplot()
    bucket, vb = where
    ax.set_title(f"vbucket {vb}" + (f" of {bucket}" if bucket else ""), loc="left",
                 fontsize=11)
    ax.set_xlabel(f"time since the first frame ({unit})")
    ax.set_ylabel("seqno")
    conns = sorted({lane.conn for lane in lanes})
    color = {c: conn_color(c) for c in conns}
    seqnos: list[int] = []
    shown_kinds: set[str] = set()
    for lane in lanes:
        col = color[lane.conn]
        stop = ms(lane.last_ts)
        for i, (ts, start, end, _frame) in enumerate(lane.snapshots):
            x0 = ms(ts)
            x1 = ms(lane.snapshots[i + 1][0]) if i + 1 < len(lane.snapshots) else stop
            ax.add_patch(Rectangle((x0, start - 0.4), max(x1 - x0, span / 100),
                                   end - start + 0.8, facecolor=col, alpha=0.15,
                                   edgecolor=col, linewidth=0.8))
            if len(lane.snapshots) <= SNAPSHOT_LABELS:
                ax.annotate(f"[{start},{end}]", (x0, end + 0.4), xytext=(1, 2),
                            textcoords="offset points", fontsize=6, color=col)
            seqnos += [start, end]
        by_kind: dict[str, list] = {}
        for ts, seqno, name, _frame in lane.items:
            by_kind.setdefault(name, []).append((ms(ts), seqno))
            seqnos.append(seqno)
        for name, points in by_kind.items():
            xs, ys = zip(*points)
            ax.scatter(xs, ys, marker=ITEM_MARKERS.get(name, "o"), color=col, s=22, zorder=3)
            shown_kinds.add(name)
        for ts, start, snap_start, snap_end, _frame in lane.requests:
            x = ms(ts)
            ax.vlines(x, snap_start - 0.3, snap_end + 0.3, color=col, linewidth=3, alpha=0.6)
            ax.scatter([x], [start], marker=">", s=70, color=col, edgecolor="black", zorder=4)
            ax.annotate(f"request start {start} snap [{snap_start},{snap_end}]", (x, start),
                        xytext=(6, -12), textcoords="offset points", fontsize=7, color=col)
            seqnos += [start, snap_start, snap_end]
        for ts, seqno, _frame in lane.rollbacks:
            x = ms(ts)
            ax.scatter([x], [seqno], marker="v", s=80, color="#ff7f0e", edgecolor="black",
                       zorder=4)
            ax.annotate(f"rollback to {seqno}", (x, seqno), xytext=(6, 4),
                        textcoords="offset points", fontsize=7, color="#ff7f0e")
            seqnos.append(seqno)
        last = [s for _, s, _, _ in lane.items[-1:]]
        for ts, _frame in lane.ends:
            ax.scatter([ms(ts)], last or [0], marker="s", s=40, color="black", zorder=4)
    for conn in conns:
        for ts, frame, what in collector.gaps.get(conn, ()):
            ax.axvline(ms(ts), color=FINDING_COLOR, linestyle=":", linewidth=1,
                       gid=f"gap-conn{conn}-frame{frame}")
            ax.annotate(f"gap: {what}", (ms(ts), 1), xycoords=("data", "axes fraction"),
                        xytext=(2, -10), textcoords="offset points", fontsize=7,
                        color=FINDING_COLOR)
    top = max(seqnos, default=1) + 1
    at = _seqno_of_frames(lanes)
    marks = [(number, ms(f.ts_ns if f.ts_ns is not None else t0), at.get(f.frame, top))
             for number, f in findings]
    if marks:
        numbers, xs, ys = zip(*marks)
        stars = ax.scatter(xs, ys, marker="*", s=260, color=FINDING_COLOR, edgecolor="black",
                           linewidth=0.6, zorder=5)
        stars.set_urls([f"#{finding_anchor(n)}" for n in numbers])
        stars.set_gid(f"findings-{plot_name(where)}")
        at_point: dict[tuple, list] = {}        # one label per star position
        for number, x, y in marks:
            at_point.setdefault((x, y), []).append(f"#{number}")
        for (x, y), names in at_point.items():
            ax.annotate(" ".join(names), (x, y), xytext=(7, 5), textcoords="offset points",
                        fontsize=8, color=FINDING_COLOR, fontweight="bold")
        seqnos.append(max(ys))
    low, high = min(seqnos, default=0), max(seqnos, default=1)
    margin = max(1.5, (high - low) * 0.08)      # room for the labels below the lowest point
    ax.set_ylim(low - margin, high + margin)
    ax.set_xlim(-span * 0.03, span * 1.08)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.grid(True, linewidth=0.3, alpha=0.5)
    shown_kinds |= {kind for lane in lanes for kind, seen in
                    (("rollback", lane.rollbacks), ("stream end", lane.ends)) if seen}
    if any(collector.gaps.get(c) for c in conns):
        shown_kinds.add("gap")
    _legend(ax, conns, color, labels, shown_kinds, bool(marks))
    return fig


def _seqno_of_frames(lanes: list[Lane]) -> dict[int, int]:
    """frame -> the seqno drawn for it: a request's start, a rollback seqno, an item's
    seqno or a snapshot's start (a finding's star goes there; elsewhere above the data)."""
    at: dict[int, int] = {}
    for lane in lanes:
        at.update((frame, start) for _ts, start, _end, frame in lane.snapshots)
        at.update((frame, seqno) for _ts, seqno, _name, frame in lane.items)
        at.update((frame, seqno) for _ts, seqno, frame in lane.rollbacks)
        at.update((r[4], r[1]) for r in lane.requests)
    return at


def _legend(ax, conns, color, labels, kinds, with_findings) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=color[c], alpha=0.4, edgecolor=color[c],
                     label=f"conn {c}: {labels.get(c, '')}") for c in conns]
    handles += [Line2D([], [], marker=ITEM_MARKERS.get(k, "o"), linestyle="", color="#444",
                       label=k.removeprefix("Dcp")) for k in sorted(kinds) if k.startswith("Dcp")]
    handles.append(Line2D([], [], marker=">", linestyle="", color="#444", label="request"))
    extra = {"rollback": dict(marker="v", linestyle="", color="#ff7f0e"),
             "stream end": dict(marker="s", linestyle="", color="black"),
             "gap": dict(linestyle=":", color=FINDING_COLOR)}
    handles += [Line2D([], [], label=k, **style) for k, style in extra.items() if k in kinds]
    if with_findings:
        handles.append(Line2D([], [], marker="*", linestyle="", markersize=11,
                              color=FINDING_COLOR, label="finding"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7,
              frameon=False)


def timelines(collector: TimelineCollector, findings: list, legend):
    """``((label, vbucket), Figure)`` for every vbucket with streams, its connections named
    by ``legend`` (a :class:`~.connections.ConnectionLegend`). A vbucket is one per bucket,
    and per server when the capture has several: ``label`` is the bucket's name, or
    ``<server>[-<bucket>]`` then. ``findings`` are in report order (their 1-based position
    is their number)."""
    numbered = list(enumerate(findings, 1))
    labels = {c: legend.label(c) for c in legend.opened}
    servers = {legend.where(c)[0] for c in collector.lanes_conns()}

    def label(conn):
        server, bucket = legend.where(conn)
        if len(servers) < 2:
            return bucket
        return server + (f"-{bucket}" if bucket else "")

    for where, lanes in collector.vbuckets(label).items():
        conns = {lane.conn for lane in lanes}
        mine = [(n, f) for n, f in numbered
                if f.vbucket == where[1] and f.connection in conns]
        yield where, plot_vbucket(where, lanes, collector, mine, labels)


def write_plots(directory: str, collector: TimelineCollector, findings: list,
                legend) -> list[str]:
    """``timeline-[<bucket>-]vb<N>.svg`` and ``.png`` for every vbucket into
    ``directory``."""
    import os

    os.makedirs(directory, exist_ok=True)
    written = []
    for where, fig in timelines(collector, findings, legend):
        for ext in ("svg", "png"):
            path = os.path.join(directory, f"timeline-{plot_name(where)}.{ext}")
            fig.savefig(path, format=ext, dpi=110, bbox_inches="tight",
                        metadata={"Date": None} if ext == "svg" else None)
            written.append(path)
    return written
