"""Per-stream accounting: what each DCP stream of a capture asked for, got and did.

:class:`StreamSummary` feeds an :class:`~.engine.Analyzer` and watches its stream tracker
(:mod:`.streams.tracker`): the tracker's connections say who is the consumer (roles come
from DcpOpen, not from TCP direction) and its streams carry the parsed request (fields,
stream id) and the server's answer. For each stream it counts the producer's messages by
opcode, their seqnos, the markers and the last snapshot, and records how the stream ended.
A stream whose request the capture did not show is opened by its first producer message
(``request_frame`` None). The ``dcpdissect streams`` command and the pipeline's ``streams``
table both come from here (rendered by :mod:`dcpdissect.reports.streams`).
"""

from __future__ import annotations

import json
from typing import NamedTuple

from ..codec import decode
from ..protocol import (SERVER_MAGICS, STATUS, STATUS_ROLLBACK, STATUS_SUCCESS, STREAM_END_REASONS,
                        STREAM_OPCODES, opcode_code, opcode_name)
from ..reassembly.connections import ConnectionClosed
from ..reassembly.framing import Pdu
from .streams import bounds
from .findings import Finding

STREAM_REQUEST, CLOSE_STREAM = opcode_code("DcpStreamReq"), opcode_code("DcpCloseStream")
MARKER, STREAM_END = opcode_code("DcpSnapshotMarker"), opcode_code("DcpStreamEnd")
REQUEST_FIELDS = ("start_seqno", "end_seqno", "vbucket_uuid", "snap_start_seqno",
                  "snap_end_seqno", "flags")
_INT64 = 1 << 63
_ITEM_NAMES: dict[int, str] = {}        # opcode -> name, for the producer's stream messages

# How a stream ended (``StreamStats.ended``).
ENDED_STREAM_END = "StreamEnd"          # end_reason: the StreamEnd reason's name
ENDED_CLOSE = "CloseStream"             # end_reason: the close response's status, if seen
ENDED_REFUSED = "refused"               # the stream request was answered with an error
ENDED_REPLACED = "replaced"             # a new stream request for the same vbucket and id
ENDED_CONNECTION = "connection close"   # end_reason: fin, rst, reused, evicted
ENDED_CAPTURE = "capture end"


class ConnectionOf(NamedTuple):
    """Who a stream's connection is, kept after the tracker forgets the connection."""
    id: int
    client: tuple
    server: tuple
    negotiation: object                   # its Negotiation: role, bucket, DcpOpen name


class _OnConnection:
    """The streams of one open connection: who it is, each (vbucket, stream id)'s latest
    stream, and the stream requests and closes awaiting their answer, by opaque."""
    __slots__ = ("who", "current", "answering", "closing")

    def __init__(self, who: ConnectionOf):
        self.who = who
        self.current: dict[tuple, StreamStats] = {}
        self.answering: dict[int, StreamStats] = {}
        self.closing: dict[int, StreamStats] = {}


def _remember(pending: dict, opaque: int, st) -> None:
    if len(pending) >= bounds.MAX_PENDING:      # never answered: forget the oldest
        del pending[next(iter(pending))]
    pending[opaque] = st


class StreamStats:
    """One stream's accounting. Seqnos are Python ints (64-bit values kept whole)."""
    __slots__ = ("conn", "vbucket", "stream_id", "opaque", "request_frame", "request",
                 "answer", "rollback_seqno", "answer_frame", "messages", "items",
                 "first_seqno", "last_seqno", "min_seqno", "max_seqno", "snapshot",
                 "ended", "end_reason", "end_frame", "first_frame", "last_frame",
                 "first_ts_ns", "last_ts_ns", "_close_opaque")

    def __init__(self, conn, vbucket, stream_id, opaque, pdu, request: dict | None):
        self.conn = conn                      # ConnectionOf
        self.vbucket, self.stream_id, self.opaque = vbucket, stream_id, opaque
        self.request_frame = pdu.frame if request is not None else None
        self.request = request                # REQUEST_FIELDS of the stream request, or None
        self.answer = None                    # "success", "rollback" or the status name
        self.rollback_seqno = self.answer_frame = None
        self.messages = 0                     # the producer's stream messages
        self.items: dict[str, int] = {}       # opcode name -> count (markers included)
        self.first_seqno = self.last_seqno = self.min_seqno = self.max_seqno = None
        self.snapshot: tuple[int, int] | None = None     # the last marker's [start, end]
        self.ended = self.end_reason = self.end_frame = None
        self.first_frame = self.last_frame = pdu.frame
        self.first_ts_ns = self.last_ts_ns = pdu.ts_ns
        self._close_opaque = None

    def _seen(self, pdu) -> None:
        self.last_frame = max(self.last_frame, pdu.frame)
        self.last_ts_ns = max(self.last_ts_ns, pdu.ts_ns)

    def _end(self, how: str, reason, frame) -> None:
        if self.ended is None:
            self.ended, self.end_reason, self.end_frame = how, reason, frame

    @property
    def markers(self) -> int:
        return self.items.get("DcpSnapshotMarker", 0)

    @property
    def duration_ns(self) -> int:
        return self.last_ts_ns - self.first_ts_ns


class StreamSummary:
    """Fed the capture's events in place of the analyzer (:meth:`feed`,
    :meth:`feed_message` and :meth:`finish` return the analyzer's findings, each with the
    ``vbucket_uuid`` and ``request_frame`` of the stream it falls in, :func:`stream_of`);
    :attr:`streams` holds every stream, in order of appearance."""

    def __init__(self, analyzer):
        self.analyzer = analyzer
        self.tracker = analyzer.streams
        self.streams: list[StreamStats] = []
        self._by_key: dict[tuple, list[int]] = {}     # (connection, vbucket) -> stream indexes
        self._open_conns: dict[int, _OnConnection] = {}

    def feed(self, ev) -> list[Finding]:
        """The analyzer's ``feed``, accounting each event to its stream."""
        if type(ev) is Pdu:
            return self.feed_message(ev, decode(ev.data))
        found = self.analyzer.feed(ev)
        if type(ev) is ConnectionClosed:
            on = self._open_conns.pop(ev.conn, None)
            if on is not None:
                for st in on.current.values():
                    if ev.reason == "end":      # still open when the capture ended
                        st._end(ENDED_CAPTURE, None, None)
                    else:
                        st._end(ENDED_CONNECTION, ev.reason, ev.frame)
        return self._with_uuids(found)

    def feed_message(self, pdu: Pdu, msg) -> list[Finding]:
        """The analyzer's ``feed_message``: a PDU already decoded to ``msg``."""
        found = self.analyzer.feed_message(pdu, msg)
        c = self.tracker.conns.get(pdu.conn)
        if c is None or msg.magic in SERVER_MAGICS:
            return self._with_uuids(found)
        if (msg.is_request and msg.opcode in STREAM_OPCODES and msg.vbucket is not None
                and pdu.direction != (1 if c.negotiation.consumer else 0)):
            self._stream_message(self._open_conns.get(c.id) or self._on(c), pdu, msg)
        else:
            self._message(c, pdu, msg)
        return self._with_uuids(found)

    def finish(self) -> list[Finding]:
        found = self.analyzer.finish()
        for on in self._open_conns.values():
            for st in on.current.values():
                st._end(ENDED_CAPTURE, None, None)
        self._open_conns.clear()
        return self._with_uuids(found)

    def _with_uuids(self, found: list[Finding]) -> list[Finding]:
        """``found``, each finding given the uuid and frame of its stream's request."""
        for f in found:
            i = stream_of(self._by_key, self.streams, f)
            if i is not None and self.streams[i].request is not None:
                f.vbucket_uuid = self.streams[i].request.get("vbucket_uuid")
                f.request_frame = self.streams[i].request_frame
        return found

    def _add(self, st: StreamStats) -> None:
        self._by_key.setdefault((st.conn.id, st.vbucket), []).append(len(self.streams))
        self.streams.append(st)

    # as an observer of a :class:`~.session.Pass`
    on_message = feed_message
    on_event = feed
    on_finish = finish

    def _on(self, c) -> _OnConnection:
        on = self._open_conns.get(c.id)
        if on is None:
            on = self._open_conns[c.id] = _OnConnection(
                ConnectionOf(c.id, c.client, c.server, c.negotiation))
        return on

    def _message(self, c, pdu, msg) -> None:
        from_consumer = pdu.direction == (1 if c.negotiation.consumer else 0)
        op = msg.opcode
        if msg.is_request:
            if not from_consumer:
                if op in STREAM_OPCODES and msg.vbucket is not None:
                    self._stream_message(self._on(c), pdu, msg)
            elif op == STREAM_REQUEST:
                tracked = c.stream_requests.get(msg.opaque)
                if tracked is not None and tracked.request_pdu is pdu:
                    self._open(self._on(c), pdu, tracked)
            elif op == CLOSE_STREAM:
                on = self._on(c)
                st = on.current.get((msg.vbucket, msg.stream_id))
                if st is not None:
                    st._seen(pdu)
                    st._end(ENDED_CLOSE, None, pdu.frame)
                    st._close_opaque = msg.opaque
                    _remember(on.closing, msg.opaque, st)
            return
        on = self._open_conns.get(pdu.conn)
        if on is None or from_consumer:
            return
        if op == STREAM_REQUEST:
            st = on.answering.pop(msg.opaque, None)
            if st is not None:
                self._answered(st, pdu, msg)
        elif op == CLOSE_STREAM:
            st = on.closing.pop(msg.opaque, None)
            if st is not None:
                st._seen(pdu)
                if st.ended == ENDED_CLOSE and st._close_opaque == msg.opaque:
                    st.end_reason = STATUS.text(msg.status)

    def _open(self, on: _OnConnection, pdu, tracked) -> None:
        key = (tracked.vb, tracked.sid)
        old = on.current.get(key)
        if old is not None:
            old._end(ENDED_REPLACED, None, pdu.frame)
        request = {name: tracked.request.get(name) for name in REQUEST_FIELDS}
        st = StreamStats(on.who, tracked.vb, tracked.sid, tracked.opaque, pdu, request)
        self._add(st)
        on.current[key] = st
        _remember(on.answering, tracked.opaque, st)

    def _answered(self, st: StreamStats, pdu, msg) -> None:
        st._seen(pdu)
        st.answer_frame = pdu.frame
        if msg.status == STATUS_SUCCESS:
            st.answer = "success"
            return
        if msg.status == STATUS_ROLLBACK:
            st.answer = "rollback"
            st.rollback_seqno = msg.fields.get("rollback_seqno")
        else:
            st.answer = STATUS.text(msg.status)
        st._end(ENDED_REFUSED, st.answer, pdu.frame)

    def _stream_message(self, on: _OnConnection, pdu, msg) -> None:
        key = (msg.vbucket, msg.stream_id)
        st = on.current.get(key)
        if st is None:          # its request was not captured
            st = on.current[key] = StreamStats(on.who, msg.vbucket, msg.stream_id, msg.opaque,
                                               pdu, None)
            self._add(st)
        if pdu.frame > st.last_frame:
            st.last_frame = pdu.frame
        if pdu.ts_ns > st.last_ts_ns:
            st.last_ts_ns = pdu.ts_ns
        st.messages += 1
        op, fields = msg.opcode, msg.fields
        name = _ITEM_NAMES.get(op)
        if name is None:        # the messages counted are never of a server magic
            name = _ITEM_NAMES[op] = opcode_name(msg.magic, op)
        items = st.items
        items[name] = items.get(name, 0) + 1
        if op == MARKER:
            start, end = fields.get("start_seqno"), fields.get("end_seqno")
            if start is not None and end is not None:
                st.snapshot = (start, end)
        elif op == STREAM_END:
            reason = fields.get("reason")
            st._end(ENDED_STREAM_END, None if reason is None else STREAM_END_REASONS.text(reason),
                    pdu.frame)
        seqno = fields.get("by_seqno")
        if type(seqno) is int and 0 <= seqno < _INT64:
            if st.first_seqno is None:
                st.first_seqno = st.min_seqno = st.max_seqno = seqno
            elif seqno < st.min_seqno:
                st.min_seqno = seqno
            elif seqno > st.max_seqno:
                st.max_seqno = seqno
            st.last_seqno = seqno


def stream_of(by_key: dict, streams: list[StreamStats], f: Finding) -> int | None:
    """The index in ``streams`` of the stream a finding with a connection and a vbucket
    falls in: of the streams of that connection and vbucket (``by_key``: (connection,
    vbucket) -> their indexes, in order), the latest one requested at or before its frame,
    the ones with its opaque first. None: no such stream."""
    candidates = by_key.get((f.connection, f.vbucket))
    if not candidates:
        return None
    same = [i for i in candidates if streams[i].opaque == f.opaque] or candidates
    frame = f.frame or 0
    before = [i for i in same if streams[i].first_frame <= frame]
    return before[-1] if before else same[0]


def findings_by_stream(streams: list[StreamStats], findings) -> dict[int, dict[str, int]]:
    """index in ``streams`` -> {severity: count}: each finding counts for the stream it
    falls in (:func:`stream_of`)."""
    by_key: dict[tuple, list[int]] = {}
    for i, st in enumerate(streams):
        by_key.setdefault((st.conn.id, st.vbucket), []).append(i)
    out: dict[int, dict[str, int]] = {}
    for f in findings:
        i = stream_of(by_key, streams, f)
        if i is None:
            continue
        counts = out.setdefault(i, {})
        counts[f.severity] = counts.get(f.severity, 0) + 1
    return out


# -- following streams --------------------------------------------------------------------------

STREAM_SETUP = frozenset({opcode_code("DcpAddStream"), STREAM_REQUEST, CLOSE_STREAM,
                          opcode_code("DcpGetFailoverLog")})
BUFFER_ACK = opcode_code("DcpBufferAcknowledgement")
MAX_ASKED = 1 << 16      # requests remembered per filter until answered


def request_stream_id(msg) -> int | None:
    """The stream id a request names: its frame info, or the ``sid`` of a stream request's
    JSON value (kv_engine accepts only a 16-bit integer there)."""
    if (msg.stream_id is not None or msg.opcode != STREAM_REQUEST or not msg.value_len
            or msg.value_cut):
        return msg.stream_id
    try:
        sid = json.loads(bytes(msg.value)).get("sid")
    except (ValueError, AttributeError, RecursionError):
        return None
    return sid if type(sid) is int and 0 <= sid <= 0xFFFF else None


class StreamFilter:
    """Which messages to show when following streams: the requests of the vbuckets, stream
    ids and connections asked for (each set empty: any), and the responses to them, which
    carry no vbucket and are matched by opaque on their connection, as the analyzer matches
    them. ``stream_only``: only the stream's own opcodes (Add Stream, stream request,
    failover log, close, the producer's stream messages) and the buffer acks of the
    connections that carry it, not every request that names the vbucket."""

    def __init__(self, vbuckets=(), stream_ids=(), conns=(), stream_only: bool = False):
        self.vbuckets, self.stream_ids = frozenset(vbuckets), frozenset(stream_ids)
        self.conns, self.stream_only = frozenset(conns), stream_only
        self._asked: dict[tuple, bool] = {}     # (conn, opaque) -> its request was shown
        self._carriers: set[int] = set()        # connections that carried a shown request

    def __bool__(self) -> bool:
        return bool(self.vbuckets or self.stream_ids or self.conns)

    def wants(self, pdu, msg) -> bool:
        conn = pdu.conn
        if self.conns and conn not in self.conns:
            return False
        key = (conn, msg.opaque)
        if not msg.is_request:
            return self._asked.get(key, False)
        if self.stream_only and msg.opcode == BUFFER_ACK:
            hit = conn in self._carriers
        else:
            hit = ((not self.vbuckets or msg.vbucket in self.vbuckets)
                   and (not self.stream_ids or request_stream_id(msg) in self.stream_ids)
                   and (not self.stream_only or msg.opcode in STREAM_OPCODES
                        or msg.opcode in STREAM_SETUP))
            if hit:
                self._carriers.add(conn)
        self._asked.pop(key, None)
        if len(self._asked) >= MAX_ASKED:
            del self._asked[next(iter(self._asked))]
        self._asked[key] = hit
        return hit
