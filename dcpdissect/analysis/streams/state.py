"""What the stream concerns share: connections, streams, snapshots, Add Streams, resume points.

Judges nothing. Each field says which concern writes it; the tracker (:mod:`.tracker`)
creates the objects and keeps the tables. :func:`report_on_stream` is the one way a concern
reports a finding about a stream's message (at most ``MAX_PER_RULE`` per stream and rule).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...protocol import SNAPSHOT_FLAGS, STREAM_FLAGS
from ..findings import Finding, finding_for
from ..negotiation import Negotiation
from . import bounds

FROM_LATEST = STREAM_FLAGS.bit("from_latest")   # start at the vbucket's latest seqno


class Snap:
    """The current snapshot of a stream, opened by a marker (written by snapshots.py)."""
    __slots__ = ("start", "end", "flags", "pdu", "msg", "first_of_stream", "complete",
                 "seen_keys", "faulty_marker", "convention_undecided", "uncertain")

    def __init__(self, start, end, flags, pdu, msg, first_of_stream):
        self.start, self.end, self.flags = start, end, flags
        self.pdu, self.msg = pdu, msg                  # the marker
        self.first_of_stream = first_of_stream         # the stream's first marker
        self.complete = False          # an item or SeqnoAdvanced reached its end seqno
        self.seen_keys: set | None = set()   # key hashes, for duplicates; None: not checked
        self.faulty_marker = False     # the marker broke an ordering rule: not judged again
        self.convention_undecided = True    # no item or end after the marker yet
        self.uncertain = False         # a cut may have hidden some of its messages


class Stream:
    """One stream: its request, the server's answer and how far the data went."""
    __slots__ = ("conn", "vb", "sid", "opaque", "request", "request_pdu", "response_status",
                 "active", "cut", "ended", "findings_per_rule",
                 "snap", "marker_count", "prev_marker_end", "prev_marker_flags",
                 "highest_seqno", "last_received", "advanced_to", "after_invalid_marker",
                 "reported_before_marker", "in_oso", "oso_highest", "oso_resume_seqno",
                 "oso_seen_keys", "add_stream_frame")

    def __init__(self, conn, vb, sid, opaque, request: dict | None, pdu):
        # the tracker's
        self.conn, self.vb, self.sid, self.opaque = conn, vb, sid, opaque
        # request fields (+ "filtered"); None: an implicit stream, opened by the first
        # captured marker of a stream whose request the capture did not show
        self.request, self.request_pdu = request, pdu
        self.response_status = None
        self.active = self.ended = False
        self.cut = False               # a cut may have hidden its messages since its last marker
        self.findings_per_rule: dict[str, int] = {}
        # snapshots.py's
        self.snap: Snap | None = None
        self.marker_count = 0
        self.prev_marker_end = self.prev_marker_flags = None
        # the highest seqno reached: the requested start, then items and SeqnoAdvanced
        self.highest_seqno = (0 if request is None or request.get("flags", 0) & FROM_LATEST
                              else request.get("start_seqno", 0))
        self.last_received = None      # seqno of the last item or SeqnoAdvanced received
        self.advanced_to = None        # seqno of the current snapshot's SeqnoAdvanced
        self.after_invalid_marker = False   # the last marker was malformed: data not judged
        self.reported_before_marker = False  # data-before-marker said once per snapshot gap
        self.in_oso = False
        self.oso_highest = self.oso_resume_seqno = 0   # resume: the seqno held before OSO
        self.oso_seen_keys: set | None = None
        # correlation.py's
        self.add_stream_frame = None   # the Add Stream response that announced the opaque

    def describe(self) -> str:
        sid = f" sid {self.sid}" if self.sid is not None else ""
        return f"vb {self.vb}{sid}"


class HeldError:
    """A consumer's rejection, reported when its connection ends (correlation.py)."""
    __slots__ = ("finding", "producer_messages")

    def __init__(self, finding: Finding, producer_messages: int):
        self.finding, self.producer_messages = finding, producer_messages


class Cut:
    """A stretch of one direction whose messages the capture hid (framing was lost): any
    message sent after ``since_ts`` and before ``until_ts`` (None: not yet resumed) may be
    among them."""
    __slots__ = ("direction", "since_ts", "until_ts", "frame")

    def __init__(self, direction: int, since_ts: int, frame: int):
        self.direction, self.since_ts, self.frame = direction, since_ts, frame
        self.until_ts: int | None = None


class Deferred:
    """A finding that says a message had no partner in the other direction: it stands only
    once that direction is known up to the finding's time without a cut that could hide the
    partner (sent after ``since_ts``)."""
    __slots__ = ("finding", "direction", "since_ts")

    def __init__(self, finding: Finding, direction: int, since_ts: int):
        self.finding, self.direction, self.since_ts = finding, direction, since_ts


class Conn:
    """One DCP connection: its ends, what it negotiated and its streams."""
    __slots__ = ("id", "client", "server", "mid_stream", "negotiation", "streams",
                 "untracked_streams", "stream_requests", "cut_said",
                 "producer_messages", "awaiting_ack", "acks_unknown", "held_errors",
                 "cuts", "hidden", "known_to", "deferred")

    def __init__(self, ev, negotiation: Negotiation):
        self.id, self.client, self.server = ev.conn, ev.client, ev.server
        self.mid_stream = ev.mid_stream
        self.negotiation = negotiation        # kept up to date by the Analyzer
        # the tracker's
        self.streams: dict[tuple, Stream] = {}           # (vbucket, sid) -> stream
        self.untracked_streams: set = set()   # stream keys seen without a request (said once)
        self.stream_requests: dict[int, Stream] = {}     # opaque -> stream awaiting an answer
        self.cut_said = False                   # semantics-suppressed said for a cut
        self.producer_messages = 0              # messages the producer sent
        self.cuts: list[Cut] = []               # what the capture hid, oldest first
        self.hidden = [False, False]            # per direction: framing lost right now
        self.known_to = [0, 0]                  # per direction: decoded up to this time
        self.deferred: list[Deferred] = []      # findings waiting for the other direction
        # correlation.py's
        self.awaiting_ack: dict[int, int] = {}           # opaque -> markers with Ack unanswered
        self.acks_unknown = False               # a cut may have hidden markers with Ack
        self.held_errors: list[HeldError] = []

    @property
    def producer_direction(self) -> int:
        """The direction the producer's stream messages travel: server→client, except on a
        consumer connection (ns_server's proxy leg to the consumer memcached)."""
        return 0 if self.negotiation.consumer else 1

    def cut_between(self, direction: int, since_ts: int, until_ts: int) -> bool:
        """A cut of ``direction`` may have hidden a message sent after ``since_ts`` and
        before ``until_ts``."""
        for cut in self.cuts:
            if (cut.direction == direction and cut.since_ts < until_ts
                    and (cut.until_ts is None or cut.until_ts > since_ts)):
                return True
        return False

    def defer(self, out: list, finding: Finding, direction: int, since_ts: int = -1) -> None:
        """Report ``finding`` once ``direction`` is decoded up to its time, unless a cut of
        that direction after ``since_ts`` could have hidden the partner it lacks."""
        if self.known_to[direction] >= finding.ts_ns and not self.hidden[direction]:
            if not self.cut_between(direction, since_ts, finding.ts_ns):
                out.append(finding)
            return
        if len(self.deferred) >= bounds.MAX_PENDING:
            self.deferred.pop(0)
        self.deferred.append(Deferred(finding, direction, since_ts))

    def release(self, out: list, final: bool = False) -> None:
        """The deferred findings whose direction is now decoded up to their time (every
        one when ``final``): those no cut could explain."""
        keep = []
        for d in self.deferred:
            f = d.finding
            if not final and (self.known_to[d.direction] < f.ts_ns or self.hidden[d.direction]):
                keep.append(d)
            elif not self.cut_between(d.direction, d.since_ts, f.ts_ns):
                out.append(f)
        self.deferred = keep


class AddStream:
    """ns_server's Add Stream to a consumer, until the consumer's stream request and the
    response are seen (correlation.py)."""
    __slots__ = ("conn", "consumer_host", "vb", "opaque", "pdu", "stream")

    def __init__(self, conn, consumer_host, vb, opaque, pdu):
        self.conn, self.consumer_host, self.vb, self.opaque = conn, consumer_host, vb, opaque
        self.pdu = pdu
        self.stream: Stream | None = None     # the consumer's stream request it caused


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where a consumer's stream of a vbucket stopped (resume.py)."""
    conn: int                             # the connection it was on
    last_received: int                    # the seqno to resume from
    snapshot: tuple[int, int] | None      # the snapshot it stopped in (None: none, or OSO)
    frame: int                            # the marker (or request) that shows it
    inside_oso: bool
    uncertain: bool = False               # a cut may have hidden where it stopped


def report_on_stream(st: Stream, out: list, rid: str, text: str, pdu, msg, fields=None,
                     context=()) -> None:
    """A finding about a message of ``st``; after ``MAX_PER_RULE`` of a rule, silence."""
    n = st.findings_per_rule.get(rid, 0) + 1
    st.findings_per_rule[rid] = n
    if n > bounds.MAX_PER_RULE:
        return
    if n == bounds.MAX_PER_RULE:
        text += " (further occurrences on this stream are not reported)"
    out.append(finding_for(rid, text, pdu, msg, fields, context))


def frames_of(*pdus) -> tuple[int, ...]:
    """The frames of the messages given (None skipped): a finding's context."""
    return tuple(p.frame for p in pdus if p is not None)


def marker_fields(msg) -> dict:
    f = msg.fields
    return {"start_seqno": f.get("start_seqno"), "end_seqno": f.get("end_seqno"),
            "flags": SNAPSHOT_FLAGS.text(f.get("flags", 0))}


def key_text(key) -> str:
    """A document key as shown in a finding: quoted text, or hex when not printable."""
    k = bytes(key)
    try:
        s = k.decode("utf-8")
        return repr(s) if s.isprintable() else k.hex()
    except UnicodeDecodeError:
        return k.hex()
