"""The moment of each finding: the stream events just before and after it, on its vbucket.

A stream here is keyed by server, bucket and vbucket (vbucket 0 of two servers are two
streams), so a resume on a new connection to the same server is seen beside the stream it
resumes; a finding that names its ``previous_connection`` (a resume after a move to another
server) also gets that connection's last events on the vbucket. While the
capture's events go by, each stream keeps its last :data:`BEFORE` events (requests, their
answers, snapshot markers, items, stream ends); a finding reported on it opens a
:class:`Window` with those events, which then takes the next :data:`AFTER` events. Findings
that fall inside an open window share it (a rollback loop is one window). Memory is bounded:
at most :data:`MAX_WINDOWS` windows, :data:`PER_RULE` of them for one rule.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from ..protocol import STATUS_ROLLBACK, STREAM_OPCODES, opcode_code

STREAM_REQUEST = opcode_code("DcpStreamReq")
MARKER = opcode_code("DcpSnapshotMarker")
STREAM_END = opcode_code("DcpStreamEnd")
WATCHED = STREAM_OPCODES | {STREAM_REQUEST}
BEFORE = 24
AFTER = 16
MAX_WINDOWS = 48
PER_RULE = 6


class Event(NamedTuple):
    """One stream event. ``kind``: ``request`` (``seqno`` the start, ``low``/``high`` the
    snapshot sent), ``accepted``, ``rollback`` (``seqno`` the rollback seqno), ``refused``
    (another error status), ``marker`` (``low``/``high`` the snapshot), ``end``, or the
    item's opcode name (``seqno`` its seqno)."""
    ts: int
    frame: int
    conn: int
    sid: int | None
    kind: str
    seqno: int | None = None
    low: int | None = None
    high: int | None = None


def finding_key(f) -> tuple:
    """What identifies a finding across its redacted copy."""
    return (f.rule, f.frame, f.connection, f.vbucket, f.opaque, f.ts_ns)


@dataclass
class Window:
    """The events of one stream around one or more findings' moments."""
    stream: tuple                   # (server, bucket, vbucket)
    events: list
    findings: list = field(default_factory=list)     # (Finding, index of its moment)
    wanted: int = AFTER             # events still to take

    def covers(self, f) -> bool:
        """Still taking events, or already holding ``f``'s frame."""
        return self.wanted > 0 or any(e.frame == f.frame for e in self.events)


class MomentCollector:
    """An observer of a :class:`~dcpdissect.analysis.session.Pass`: fed every message;
    :meth:`note_findings` is told the findings the report keeps (it must come after this
    collector in the pass, so that the message of a finding is already here).
    ``where(conn)`` is ``(server, bucket)`` of a connection."""

    def __init__(self, where):
        self.where = where
        self.recent: dict[tuple, deque] = {}
        self.lanes: dict[int, dict] = {}           # conn -> {vbucket: stream key}
        self.asked: dict[tuple, tuple] = {}        # (conn, opaque) -> (stream, sid, start)
        self.open: dict[tuple, list] = {}          # stream -> windows still taking events
        self.windows: list[Window] = []
        self.per_rule: dict[str, int] = {}
        self.last_ts: int | None = None

    def stream_of(self, conn: int, vb: int) -> tuple:
        streams = self.lanes.setdefault(conn, {})
        key = streams.get(vb)
        if key is None:
            key = streams[vb] = (*self.where(conn), vb)
        return key

    def on_message(self, pdu, msg) -> None:
        ts = pdu.ts_ns
        if self.last_ts is None or ts > self.last_ts:
            self.last_ts = ts
        if msg.opcode in WATCHED:
            self._message(pdu, msg)

    def on_event(self, ev) -> None:
        ts = getattr(ev, "ts_ns", None)
        if ts is not None and (self.last_ts is None or ts > self.last_ts):
            self.last_ts = ts

    def _message(self, pdu, msg) -> None:
        f, conn = msg.fields, pdu.conn
        if not msg.is_request:
            asked = self.asked.pop((conn, msg.opaque), None)
            if asked is None or msg.opcode != STREAM_REQUEST:
                return
            stream, sid, start = asked
            if msg.status == STATUS_ROLLBACK and "rollback_seqno" in f:
                ev = Event(pdu.ts_ns, pdu.frame, conn, sid, "rollback", f["rollback_seqno"])
            else:
                ev = Event(pdu.ts_ns, pdu.frame, conn, sid,
                           "accepted" if msg.status == 0 else "refused", start)
            self._add(stream, ev)
            return
        stream = self.stream_of(conn, msg.vbucket)
        sid = msg.stream_id
        if msg.opcode == STREAM_REQUEST:
            if "start_seqno" not in f:
                return
            self.asked[(conn, msg.opaque)] = (stream, sid, f["start_seqno"])
            ev = Event(pdu.ts_ns, pdu.frame, conn, sid, "request", f["start_seqno"],
                       f["snap_start_seqno"], f["snap_end_seqno"])
        elif msg.opcode == MARKER:
            if "start_seqno" not in f:
                return
            ev = Event(pdu.ts_ns, pdu.frame, conn, sid, "marker", None, f["start_seqno"],
                       f["end_seqno"])
        elif msg.opcode == STREAM_END:
            ev = Event(pdu.ts_ns, pdu.frame, conn, sid, "end")
        else:
            seqno_field = msg.spec.seqno_field if msg.spec else None
            if not seqno_field or seqno_field not in f:
                return
            ev = Event(pdu.ts_ns, pdu.frame, conn, sid, msg.name, f[seqno_field])
        self._add(stream, ev)

    def _add(self, stream: tuple, ev: Event) -> None:
        recent = self.recent.get(stream)
        if recent is None:
            recent = self.recent[stream] = deque(maxlen=BEFORE)
        recent.append(ev)
        if self.open:
            windows = self.open.get(stream)
            if windows:
                for w in windows:
                    w.events.append(ev)
                    w.wanted -= 1
                windows[:] = [w for w in windows if w.wanted > 0]
                if not windows:
                    del self.open[stream]

    def note_findings(self, found: list) -> None:
        """Findings the report keeps, as they are reported."""
        for f in found:
            if f.vbucket is None or f.connection is None:
                continue
            stream = self.stream_of(f.connection, f.vbucket)
            shared = next((w for w in self.windows if w.stream == stream and w.covers(f)),
                          None)
            if shared is not None:
                shared.findings.append((f, len(shared.events)))
                continue
            if (len(self.windows) >= MAX_WINDOWS
                    or self.per_rule.get(f.rule, 0) >= PER_RULE):
                continue
            self.per_rule[f.rule] = self.per_rule.get(f.rule, 0) + 1
            events = list(self.recent.get(stream, ()))
            previous = f.fields.get("previous_connection")
            if type(previous) is int:
                before = self.stream_of(previous, f.vbucket)
                if before != stream:                # a resume on another server
                    events = sorted(events + list(self.recent.get(before, ())),
                                    key=lambda e: (e.ts, e.frame))
            w = Window(stream, events, [(f, len(events))])
            self.windows.append(w)
            self.open.setdefault(stream, []).append(w)

    def window_of(self) -> dict[tuple, Window]:
        """:func:`finding_key` -> the window that shows that finding."""
        return {finding_key(f): w for w in self.windows for f, _at in w.findings}
