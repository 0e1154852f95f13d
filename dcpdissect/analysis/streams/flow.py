"""Flow: flow control, noop liveness, answers to messages never sent, the producer's datatypes.

Per connection, in both roles (on a consumer connection the producer's data travels
client→server and the consumer sends the DcpControl requests and the buffer acks
server→client):

* **Flow control** as engines/ep/src/dcp/producer.cc DcpProducer::BufferLog counts it: the
  window is the accepted ``connection_buffer_size`` (control(); 0, the default, disables
  flow control), every message the producer's streams send (``Opcode.stream`` in the
  protocol tables) passes ``bufferLogInsert(getMessageSize())`` (active_stream.cc
  ActiveStream::nextQueuedItem: its header, extras, key, value and stream-id frame info,
  i.e. the bytes on the wire; SetVBucketState counts 25), noops bypass it (maybeSendNoop
  runs before the isFull check in DcpProducer::step); ``insert`` succeeds while
  ``bytesOutstanding < maxBytes``, so the message that crosses the window is legal and the
  next one is not; a buffer ack releases its bytes
  (BufferLog::acknowledge → release: more than outstanding is logged and the counter wraps).
  The consumer acks what it received (consumer.cc UpdateFlowControl per message, FlowControl::
  handleFlowCtl), in capture order: an ack captured before a producer message may have
  reached the producer before it sent it, so the verdicts lean the producer's way.
* **Noop liveness**: with ``enable_noop`` accepted the producer sends a DcpNoop when
  ``set_noop_interval`` (default DcpProducer::defaultDcpNoopTxInterval, 20 s) has passed since
  the last one and the last one was answered (maybeSendNoop); it checks at its own pace (the
  connection manager interval), so only an idle period longer than twice the interval plus
  :data:`NOOP_MARGIN_NS` is reported.
* **The consumer's silence**: with ``enable_noop`` accepted the producer disconnects once it
  has received nothing for ``dcp_idle_timeout`` (DcpProducer::maybeDisconnect,
  :data:`IDLE_TIMEOUT_NS` by default): reported when the producer's noop is left unanswered
  and the consumer sends nothing the producer counts (:data:`RESETS_IDLE`, any response) past
  that timeout, seen at the connection's next message or its end; when the producer's side
  closes the connection within :data:`NOOP_MARGIN_NS` after the timeout, the finding says
  that this is why.
* **Responses to messages never sent**: a response whose (opcode, opaque) matches no request
  captured in the other direction, once the capture shows the connection's start and until
  bytes of it are lost. The consumer's answers to noops and to the messages it must not
  answer (``Opcode.reply``: SeqnoAdvanced, OSO) are left to :mod:`.controls`.
* **Datatypes the producer sends** on a producer connection (server→client): Snappy without
  HELLO Snappy, Xattr without the DcpOpen flag include_xattrs. What the client sends is the
  single-message rules' (``datatype-not-negotiated``).

A connection whose negotiation the capture did not show (started inside it) gets at most one
info finding, ``flow-control-undecided``, when it shows buffer acks or noops.

The per-connection series of unacked bytes (:meth:`Flow.timelines`) is kept bounded:
at most :data:`MAX_POINTS` points, halved (every other point kept) when full.
"""

from __future__ import annotations

from ...protocol import (DATATYPE, DCP_OPEN_FLAGS, HEADER_SIZE, HELLO_FEATURES, NO_REPLY_OPCODES,
                         STREAM_OPCODES, opcode_code)
from ..findings import finding_for
from ..rules.flow import (BUFFER_ACK_EXCEEDS_SENT, CONSUMER_IDLE_TIMEOUT, FLOW_CONTROL_UNDECIDED,
                          FLOW_CONTROL_WINDOW_EXCEEDED, NOOP_INTERVAL_EXCEEDED,
                          PRODUCER_DATATYPE_NOT_NEGOTIATED, RESPONSE_WITHOUT_REQUEST)
from .state import Conn

OP = {n: opcode_code(n) for n in ("DcpControl", "DcpNoop", "DcpBufferAcknowledgement",
                                  "DcpStreamEnd")}
NOOP, STREAM_END = OP["DcpNoop"], OP["DcpStreamEnd"]
DEFAULT_NOOP_NS = 20_000_000_000        # producer.cc defaultDcpNoopTxInterval (20 s)
NOOP_MARGIN_NS = 5_000_000_000          # the connection manager's pace, and the network
IDLE_TIMEOUT_NS = 360_000_000_000       # configuration.json dcp_idle_timeout (default 360 s)
# the consumer's requests that set DcpProducer::lastReceiveTime (every response does too)
RESETS_IDLE = frozenset(opcode_code(n) for n in (
    "DcpStreamReq", "DcpCloseStream", "DcpBufferAcknowledgement", "DcpControl",
    "DcpGetFailoverLog"))
SNAPPY, XATTR = DATATYPE.bit("snappy"), DATATYPE.bit("xattr")
FEATURE_SNAPPY = HELLO_FEATURES.code("SNAPPY")
OPEN_XATTRS = DCP_OPEN_FLAGS.bit("include_xattrs")
MAX_CONNS = 4096
MAX_REQUESTS = 4096          # (opcode, opaque) of requests remembered per direction
MAX_PER_RULE = 5             # findings per connection and rule
MAX_POINTS = 256             # timeline points per connection
MAX_TIMELINES = 256          # connections whose timeline is kept


class ConnFlow:
    """One connection's flow-control, noop and request bookkeeping."""
    __slots__ = ("conn", "judged", "pending", "window", "sent", "acked", "broken",
                 "realign", "lower_bound", "noop", "noop_interval", "noop_pending",
                 "idle_since", "heard", "unanswered", "requests", "reported",
                 "undecided_said", "points", "stride", "skipped")

    def __init__(self, conn: Conn):
        self.conn = conn
        self.judged = not conn.mid_stream        # the negotiation is on the capture
        self.pending: dict[int, tuple[str, str]] = {}    # DcpControl opaque -> (key, value)
        self.window = 0 if self.judged else None  # connection_buffer_size; None: unknown
        self.sent = self.acked = 0
        self.broken = False        # an ack beyond what was sent: the producer's count wrapped
        self.realign = False       # a cut: counting waits for the next buffer ack
        self.lower_bound = False   # after a cut: sent - acked only bounds the unacked bytes
        self.noop = False if self.judged else None
        self.noop_interval = DEFAULT_NOOP_NS
        self.noop_pending = False
        self.idle_since: int | None = None
        self.heard: tuple | None = None     # (ts, frame): the consumer's last counted message
        self.unanswered: tuple | None = None   # (pdu, msg): the producer's unanswered noop
        self.requests: tuple[dict, dict] = ({}, {})     # per direction: (opcode, opaque)
        self.reported: dict[str, int] = {}
        self.undecided_said = False
        self.points: list[list] = []
        self.stride, self.skipped = 1, 0


class Flow:
    """Judges flow control, noop liveness, unrequested responses and producer datatypes."""

    def __init__(self):
        self.conns: dict[int, ConnFlow] = {}
        self.series: dict[int, list[list]] = {}    # finished connections' timelines

    def _record(self, c: Conn) -> ConnFlow:
        rec = self.conns.get(c.id)
        if rec is None or rec.conn is not c:
            if rec is not None:
                self._keep_series(rec)
            elif len(self.conns) >= MAX_CONNS:
                self._keep_series(self.conns.pop(next(iter(self.conns))))
            rec = self.conns[c.id] = ConnFlow(c)
        return rec

    # --- the hook (called by the tracker for every message it is fed) --------------------

    def on_message(self, c: Conn, pdu, msg, from_consumer: bool, out: list) -> None:
        rec = self.conns.get(c.id)
        if rec is None or rec.conn is not c:
            rec = self._record(c)
        if rec.unanswered is not None:
            self._idle(rec, pdu.ts_ns, pdu.frame, out)
        op = msg.opcode
        if msg.is_request:
            reqs = rec.requests[pdu.direction]
            if (op, msg.opaque) not in reqs:
                if len(reqs) >= MAX_REQUESTS:
                    del reqs[next(iter(reqs))]
                reqs[(op, msg.opaque)] = pdu.frame
            if from_consumer:
                self._consumer_request(rec, pdu, msg, out)
            else:
                self._producer_request(rec, pdu, msg, out)
        else:
            self._response(rec, pdu, msg, from_consumer, out)

    def on_cut(self, c: Conn, consumer_side: bool) -> None:
        """A cut hid messages: bytes sent or acks are no longer known until the next buffer
        ack (from then on sent - acked is a lower bound of the unacked bytes); a silence of
        the producer, or whether its noop was answered, is not judged across it."""
        rec = self.conns.get(c.id)
        if rec is None or rec.conn is not c:
            return
        rec.realign = True
        if consumer_side:
            rec.noop_pending = True          # judged again once a noop response is seen
            rec.heard = rec.unanswered = None   # its answer, or other messages, may be hidden
        else:
            rec.idle_since = None
            if rec.pending:                  # a control's answer may be hidden
                rec.window = rec.noop = None

    def on_end(self, c: Conn, closed=None, out: list | None = None) -> None:
        """The connection ended: ``closed`` (a ConnectionClosed), when the capture shows it
        closing, may be the producer's idle disconnect."""
        rec = self.conns.pop(c.id, None)
        if rec is not None and rec.conn is c:
            if closed is not None and rec.unanswered is not None:
                self._idle_at_close(rec, closed, out)
            self._keep_series(rec)

    # --- requests -------------------------------------------------------------------------

    def _consumer_request(self, rec: ConnFlow, pdu, msg, out) -> None:
        op = msg.opcode
        if op in RESETS_IDLE:
            rec.heard = (pdu.ts_ns, pdu.frame)
        if op == OP["DcpControl"]:
            if msg.value_cut or msg.key_cut:        # which control: not captured
                rec.window = rec.noop = None
                return
            if len(rec.pending) >= 64:
                del rec.pending[next(iter(rec.pending))]
            rec.pending[msg.opaque] = (bytes(msg.key).decode("utf-8", "replace"),
                                       bytes(msg.value).decode("utf-8", "replace"))
        elif op == OP["DcpBufferAcknowledgement"]:
            n = msg.fields.get("bytes_to_ack")
            if n is None:
                return
            if rec.window is None:
                self._undecided(rec, pdu, msg, out, "a buffer acknowledgement")
                return
            if not rec.judged or not rec.window or rec.broken:
                return               # BufferLog::acknowledge: ignored while disabled
            if rec.realign:          # counting starts again here
                rec.realign, rec.lower_bound = False, True
                rec.sent = rec.acked = 0
                return
            if rec.acked + n > rec.sent:
                if rec.lower_bound:  # it acks bytes sent before the cut
                    rec.acked = rec.sent
                    return
                self._report(rec, out, BUFFER_ACK_EXCEEDS_SENT.id, f"buffer ack of {n} bytes, "
                             f"but only {rec.sent - rec.acked} bytes sent by the producer are "
                             f"unacknowledged ({rec.sent} counted, {rec.acked} acked): the "
                             "producer logs it and its outstanding count wraps", pdu, msg,
                             {"bytes_to_ack": n, "sent": rec.sent, "acked": rec.acked,
                              "window": rec.window}, rec.conn.producer_direction)
                rec.broken = True
                return
            rec.acked += n
            self._point(rec, pdu.ts_ns)

    def _producer_request(self, rec: ConnFlow, pdu, msg, out) -> None:
        op, t = msg.opcode, pdu.ts_ns
        if rec.noop is None and op == NOOP:
            self._undecided(rec, pdu, msg, out, "a noop")
        if rec.noop and rec.judged and not rec.noop_pending and rec.idle_since is not None:
            limit = 2 * rec.noop_interval + NOOP_MARGIN_NS
            if t - rec.idle_since > limit:
                # a noop answer the capture hid would have let the producer send a noop
                self._report(rec, out, NOOP_INTERVAL_EXCEEDED.id, f"the producer was silent "
                             f"for {(t - rec.idle_since) / 1e9:.1f} s without a noop, with "
                             f"enable_noop accepted and a noop interval of "
                             f"{rec.noop_interval / 1e9:g} s", pdu, msg,
                             {"idle_s": round((t - rec.idle_since) / 1e9, 3),
                              "noop_interval_s": rec.noop_interval / 1e9},
                             1 - pdu.direction, rec.idle_since)
        rec.idle_since = t
        if op == NOOP:
            rec.noop_pending = True
            if rec.unanswered is None:
                rec.unanswered = (pdu, msg)
            return
        if op not in STREAM_OPCODES or rec.realign:     # BufferLog counts stream messages
            return
        if rec.judged and rec.window and not rec.broken:
            outstanding = rec.sent - rec.acked
            if outstanding >= rec.window and op != STREAM_END:
                # a buffer ack the capture hid would have opened the window
                self._report(rec, out, FLOW_CONTROL_WINDOW_EXCEEDED.id, f"{msg.name} sent with "
                             f"{outstanding if not rec.lower_bound else f'at least {outstanding}'}"
                             f" bytes unacknowledged, the consumer's window "
                             f"(connection_buffer_size) being {rec.window}: the producer "
                             "stops at a full window until a buffer ack", pdu, msg,
                             {"unacked": outstanding, "window": rec.window}, 1 - pdu.direction)
        rec.sent += HEADER_SIZE + msg.bodylen
        if rec.window and rec.judged:
            self._point(rec, t)
        if msg.datatype & (SNAPPY | XATTR) and pdu.direction == 1:
            self._datatype(rec, pdu, msg, out)

    def _datatype(self, rec: ConnFlow, pdu, msg, out) -> None:
        neg = rec.conn.negotiation
        if not rec.judged or neg.consumer is not False or neg.open_flags is None:
            return
        bad = []
        if msg.datatype & SNAPPY and neg.features is not None \
                and FEATURE_SNAPPY not in neg.features:
            bad.append("snappy without HELLO Snappy")
        if msg.datatype & XATTR and not neg.open_flags & OPEN_XATTRS:
            bad.append("xattr without the DcpOpen flag include_xattrs")
        if bad:
            self._report(rec, out, PRODUCER_DATATYPE_NOT_NEGOTIATED.id, f"{msg.name} from the "
                         f"producer with datatype {msg.datatype:#04x}: " + ", ".join(bad)
                         + "; the producer inflates or strips such values", pdu, msg,
                         {"datatype": msg.datatype})

    # --- responses ------------------------------------------------------------------------

    def _response(self, rec: ConnFlow, pdu, msg, from_consumer: bool, out) -> None:
        op = msg.opcode
        asked = rec.requests[1 - pdu.direction]
        if (op, msg.opaque) not in asked:
            if rec.judged and not (from_consumer and (op == NOOP or op in NO_REPLY_OPCODES)):
                self._report(rec, out, RESPONSE_WITHOUT_REQUEST.id, f"{msg.name} response "
                             f"(opaque {msg.opaque:#x}) answers no request captured in the "
                             "other direction", pdu, msg, {"opcode": f"{op:#04x}"},
                             1 - pdu.direction)
        if from_consumer:
            rec.heard = (pdu.ts_ns, pdu.frame)      # DcpProducer::handleResponse
            if op == OP["DcpNoop"]:
                rec.unanswered = None
                if rec.noop_pending:
                    rec.noop_pending = False
                    rec.idle_since = max(rec.idle_since or 0, pdu.ts_ns)
            return
        if op != OP["DcpControl"]:
            return
        kv = rec.pending.pop(msg.opaque, None)
        if kv is None or msg.status != 0:
            return
        key, value = kv
        if key == "connection_buffer_size" and rec.window is not None:
            try:
                size = int(value)
            except ValueError:
                return
            if not 0 <= size < 2**32:
                return
            rec.window = size
            if size == 0:                 # BufferLog::setBufferSize(0) resets the counts
                rec.sent = rec.acked = 0
                rec.broken = False
            self._point(rec, pdu.ts_ns)
        elif key == "enable_noop" and rec.noop is not None:
            rec.noop = value == "true"
            rec.idle_since = max(rec.idle_since or 0, pdu.ts_ns)
        elif key == "set_noop_interval":
            try:
                secs = float(value)
            except ValueError:
                return
            if secs > 0 and secs == secs and secs < 1e9:
                rec.noop_interval = int(secs * 1e9)
                rec.idle_since = max(rec.idle_since or 0, pdu.ts_ns)

    # --- the consumer's silence ------------------------------------------------------------

    def _idle(self, rec: ConnFlow, now: int, frame: int, out) -> None:
        """A message at ``now``: the connection is still open past the idle timeout."""
        if (rec.heard is not None and rec.noop and rec.judged
                and now > rec.heard[0] + IDLE_TIMEOUT_NS + NOOP_MARGIN_NS):
            self._idle_finding(rec, out, now, frame, f"the connection was still open at "
                               f"frame {frame}: this producer's dcp_idle_timeout is above the "
                               "default", None)

    def _idle_at_close(self, rec: ConnFlow, closed, out) -> None:
        first = closed.first_close
        at = first[1:] if first is not None else (closed.frame, closed.ts_ns)
        if (at[1] is None or rec.heard is None or not (rec.noop and rec.judged)
                or at[1] <= rec.heard[0] + IDLE_TIMEOUT_NS):
            return
        by = None if first is None else (
            "producer" if first[0] == rec.conn.producer_direction else "consumer")
        late = at[1] - rec.heard[0]
        if by == "producer" and late <= IDLE_TIMEOUT_NS + NOOP_MARGIN_NS:
            tail = (f"the producer's side closed the connection at frame {at[0]}: its idle "
                    "disconnect (DcpProducer::maybeDisconnect)")
        else:
            who = f"the {by}'s side" if by else "the connection"
            tail = f"{who} closed it at frame {at[0]}"
        self._idle_finding(rec, out, at[1], at[0], tail, by)

    def _idle_finding(self, rec: ConnFlow, out, now: int, frame, tail: str, by) -> None:
        pdu, msg = rec.unanswered
        rec.unanswered = None                   # said once per noop
        heard_ts, heard_frame = rec.heard
        idle = (now - heard_ts) / 1e9
        self._report(rec, out, CONSUMER_IDLE_TIMEOUT.id, f"the producer's noop (opaque "
                     f"{msg.opaque:#x}) went unanswered and the consumer sent nothing the "
                     f"producer counts for {idle:.1f} s after frame {heard_frame}, beyond "
                     f"dcp_idle_timeout ({IDLE_TIMEOUT_NS // 10**9} s by default): {tail}",
                     pdu, msg, {"idle_s": round(idle, 3), "noop_opaque": msg.opaque,
                                "dcp_idle_timeout_s": IDLE_TIMEOUT_NS // 10**9,
                                "closed_by": by},
                     context=tuple(f for f in (heard_frame, frame) if f is not None))

    # --- findings and timelines -----------------------------------------------------------

    def _report(self, rec: ConnFlow, out, rid, text, pdu, msg, fields, partner=None,
                since_ts: int = -1, context: tuple = ()) -> None:
        """``partner``: the direction whose message, had a cut hidden it after ``since_ts``,
        would make the finding wrong (it waits for that direction: Conn.defer)."""
        n = rec.reported.get(rid, 0) + 1
        rec.reported[rid] = n
        if n > MAX_PER_RULE:
            return
        if n == MAX_PER_RULE:
            text += " (further occurrences on this connection are not reported)"
        f = finding_for(rid, text, pdu, msg, fields, context)
        if partner is None:
            out.append(f)
        else:
            rec.conn.defer(out, f, partner, since_ts)

    def _undecided(self, rec: ConnFlow, pdu, msg, out, what: str) -> None:
        if rec.undecided_said:
            return
        rec.undecided_said = True
        out.append(finding_for(FLOW_CONTROL_UNDECIDED.id, f"{msg.name}: {what} on a connection "
                               "whose negotiation the capture did not show: the window "
                               "(connection_buffer_size), the bytes sent before the capture "
                               "and the noop settings are unknown, flow control and noop "
                               "liveness are not judged on it", pdu, msg, {}))

    def _point(self, rec: ConnFlow, ts_ns: int) -> None:
        rec.skipped += 1
        if rec.skipped < rec.stride:
            return
        rec.skipped = 0
        if len(rec.points) >= MAX_POINTS:
            rec.points = rec.points[::2]
            rec.stride *= 2
        rec.points.append([ts_ns, rec.sent - rec.acked])

    def _keep_series(self, rec: ConnFlow) -> None:
        if rec.points and rec.judged is not None:
            if rec.conn.id not in self.series and len(self.series) >= MAX_TIMELINES:
                return
            self.series[rec.conn.id] = rec.points

    def timelines(self) -> dict[int, list[list]]:
        """Connection -> [[ts_ns, unacked bytes], ...] for every connection whose producer
        sent counted bytes under a flow-control window (finished ones first)."""
        out = dict(self.series)
        for rec in self.conns.values():
            if rec.points and (rec.conn.id in out or len(out) < MAX_TIMELINES):
                out[rec.conn.id] = rec.points
        return out
