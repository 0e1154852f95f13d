"""The stream tracker: connection and stream bookkeeping, and dispatch to the concerns.

Judges little itself: where the stream rules cannot apply (``semantics-suppressed``: a
cut hid messages, or a stream's request was not captured). It keeps the table of
connections and of their streams (a stream request opens one, its response activates it,
STREAM_END or the connection's end closes it) and hands each message to the concerns in a
fixed order: :mod:`.lifecycle`, :mod:`.snapshots`, :mod:`.correlation`, :mod:`.resume`,
:mod:`.relay`, :mod:`.controls`, :mod:`.durability`, :mod:`.flow`.

A cut (missing bytes that hid message boundaries, or garbage skipped) makes uncertain only
what it could have hidden. In the producer's direction: each open stream's snapshot rules
stop until its next marker, the sync writes outstanding, the collections dropped, the noops
and bytes sent. In the consumer's: the negotiation from then on, requests that could have
replaced a stream, acks and buffer acks. A finding that says a message had no partner in the
other direction is deferred (:meth:`.state.Conn.defer`) until that direction is decoded up
to the message's time, and dropped if a cut there could have hidden the partner, whatever
the order in which the two directions reveal their cuts.

A stream whose request the capture did not show (it started inside the connection) is
opened implicitly by the producer's first captured marker for its (vbucket, stream id):
from there on the rules that need only the markers apply (snapshot membership and order,
SeqnoAdvanced, completeness, duplicates), never those that need the request (first-marker
conventions, resume, Add Stream and opaque correlation). Such a stream has ``request`` None.

A consumer is its DcpOpen name on a server and bucket, not its TCP connection: when a
DcpOpen with a name is accepted, a connection that holds the same name on the same server
(its address: 11207 is TLS to the same memcached as 11210) and bucket loses its streams,
whether or not the capture shows it closing (kv_engine
engines/ep/src/dcp/dcpconnmap.cc DcpConnMap::newProducer "Disconnecting existing Dcp
Producer as it has the same name as a new connection" → flagDisconnect, then
DcpProducer::setDisconnect sets every stream dead; DcpConnMap::newConsumer likewise
→ DcpConsumer::setDisconnect → closeAllStreams). So a restart without FIN or RST, a
half-close, or a connection still open all leave the resume point of :mod:`.resume`.
"""

from __future__ import annotations

import json

from ...protocol import SERVER_MAGICS, STATUS_ROLLBACK, STATUS_SUCCESS, STREAM_OPCODES, opcode_code
from ..findings import Finding, finding_for
from ..negotiation import Negotiation
from ..rules.stream import SEMANTICS_SUPPRESSED
from . import bounds
from .controls import Controls
from .correlation import Correlation
from .lifecycle import Lifecycle
from .durability import Durability
from .flow import Flow
from .relay import Relay
from .resume import Resume
from .snapshots import MARKER, STREAM_END, Snapshots
from .state import Conn, Cut, Stream

STREAM_REQUEST, ADD_STREAM = opcode_code("DcpStreamReq"), opcode_code("DcpAddStream")
DCP_OPEN = opcode_code("DcpOpen")


class StreamTracker:
    """Tracks DCP connections and streams; each hook returns the findings it completes.

    ``on_marker(pdu, label)``, when given, is called once for every snapshot marker
    request the tracker is fed, with its start-seqno convention (one of
    :data:`dcpdissect.analysis.conventions.LABELS`, or None when none applies): at once,
    or as soon as the data after the marker decides it (at the latest in :meth:`finish`).
    """

    def __init__(self, on_marker=None, all_rules: bool = True):
        self.all_rules = all_rules   # False: the bookkeeping and snapshot rules only
        self.conns: dict[int, Conn] = {}
        # (DcpOpen name, bucket) -> {server address: the connection that holds the name there}
        self.names: dict[tuple, dict] = {}
        self.snapshots = Snapshots(on_marker, duplicate_keys=all_rules)
        self.correlation = Correlation()
        self.resume = Resume()
        self.controls = Controls()
        self.relay = Relay()     # the two legs of ns_server's proxy
        self.lifecycle = Lifecycle(self.controls)
        self.durability = Durability(self.controls)
        self.flow = Flow()       # flow control, noops, unrequested answers, datatypes sent

    # --- hooks ----------------------------------------------------------------------------

    def on_open(self, ev, negotiation: Negotiation | None = None) -> list[Finding]:
        """A connection opens; ``negotiation`` is its record, kept up to date by the caller
        (without one, nothing it negotiated is known)."""
        self.conns[ev.conn] = Conn(ev, negotiation or Negotiation(not ev.mid_stream))
        return []

    def on_message(self, pdu, msg, opened, negotiation: Negotiation | None = None
                   ) -> list[Finding]:
        c = self.conns.get(pdu.conn)
        if c is None:
            if opened is None:
                self.snapshots.not_judged(pdu, msg)
                return []
            c = self.conns[pdu.conn] = Conn(opened, negotiation
                                            or Negotiation(not opened.mid_stream))
        out: list[Finding] = []
        if msg.magic in SERVER_MAGICS:
            self.snapshots.not_judged(pdu, msg)
            return out
        if (msg.opcode == DCP_OPEN and not msg.is_request and pdu.direction == 1
                and msg.status == STATUS_SUCCESS):
            self._name_taken(c, pdu, out)
        all_rules = self.all_rules
        if all_rules:
            self.relay.on_message(c, pdu, msg, out)
        # Roles come from DcpOpen, not from TCP: on a producer connection the DCP consumer
        # is the TCP client; on a consumer connection (ns_server's proxy leg to the consumer
        # memcached) it is the TCP server, which sends the stream request and receives the
        # data. Add Stream always goes from ns_server to the consumer memcached.
        from_consumer = pdu.direction == (1 if c.negotiation.consumer else 0)
        if all_rules:
            self.lifecycle.on_message(c, pdu, msg, from_consumer, out)   # before the end is recorded
        op = msg.opcode
        if msg.is_request:
            if op == ADD_STREAM:
                self.correlation.on_add_stream(c, pdu, msg)
            elif from_consumer:
                self._consumer_request(c, pdu, msg, out)
            else:
                c.producer_messages += 1
                if op in STREAM_OPCODES:
                    self._stream_message(c, pdu, msg, out)
        elif op == ADD_STREAM:
            self.correlation.on_add_stream_response(c, pdu, msg, out)
        elif not from_consumer:
            c.producer_messages += 1
            self._producer_response(c, pdu, msg, out)
        else:
            self.correlation.on_consumer_response(c, pdu, msg, out)
        if all_rules:
            self.controls.on_message(c, pdu, msg, from_consumer, out)
            self.durability.on_message(c, pdu, msg, from_consumer, out)
            self.flow.on_message(c, pdu, msg, from_consumer, out)
        if pdu.ts_ns > c.known_to[pdu.direction]:
            c.known_to[pdu.direction] = pdu.ts_ns
        if c.deferred:
            c.release(out)
        return out

    def on_hidden(self, ev) -> list[Finding]:
        """A cut hid message boundaries of one direction (framing resumes at a Resync)."""
        c = self.conns.get(ev.conn)
        if c is None:
            return []
        c.hidden[ev.direction] = True
        side = "client→server" if ev.direction == 0 else "server→client"
        what = "not captured" if ev.cause == "uncaptured" else "missing"
        return self._cut(c, Cut(ev.direction, ev.since_ts, ev.frame), ev,
                         f"{side} bytes {what} before frame {ev.frame} hid messages")

    def on_lost(self, ev) -> list[Finding]:
        """A message whose header was not captured whole (or that the capture's end cut):
        a cut of one message, whatever it was."""
        c = self.conns.get(ev.conn)
        if c is None:
            return []
        cut = Cut(ev.direction, c.known_to[ev.direction], ev.frame)
        cut.until_ts = ev.ts_ns
        side = "client→server" if ev.direction == 0 else "server→client"
        return self._cut(c, cut, ev, f"a {side} message was not captured whole at frame "
                                     f"{ev.frame}")

    def on_resync(self, ev) -> list[Finding]:
        """Framing resumed: after a cut, or after garbage (itself a cut)."""
        c = self.conns.get(ev.conn)
        if c is None or ev.reason == "mid_stream":
            return []
        d = ev.direction
        if ev.reason == "garbage":
            cut = Cut(d, c.known_to[d], ev.frame)
            cut.until_ts = ev.ts_ns
            side = "client→server" if d == 0 else "server→client"
            return self._cut(c, cut, ev, f"{ev.skipped} {side} bytes skipped to resynchronise "
                                         f"at frame {ev.frame}")
        c.hidden[d] = False
        for cut in reversed(c.cuts):
            if cut.direction == d:
                if cut.until_ts is None:
                    cut.until_ts = ev.ts_ns
                break
        return []

    def on_close(self, ev) -> list[Finding]:
        c = self.conns.pop(ev.conn, None)
        if c is None:
            return []
        self._release_name(c)
        out: list[Finding] = []
        self.flow.on_end(c, ev, out)        # (the close may be the producer's idle disconnect)
        self.lifecycle.forget(c)
        c.release(out, final=True)
        out += self.correlation.on_close(c, f"the connection was closed ({ev.reason}"
                                            + (f" at frame {ev.frame})" if ev.frame else ")"))
        self.relay.on_end(c, f"closed: {ev.reason}" + (f" at frame {ev.frame}" if ev.frame
                                                      else ""), out)
        for st in c.streams.values():
            self._end_stream(c, st, out)
        return out

    def finish(self) -> list[Finding]:
        out: list[Finding] = []
        for c in list(self.conns.values()):
            self.flow.on_end(c)
            c.release(out, final=True)
            out += self.correlation.on_close(c, "the connection stayed open to the end of "
                                                "the capture")
            self.relay.on_end(c, "the capture ended", out)
            for st in c.streams.values():
                self._end_stream(c, st, out)
        self.conns.clear()
        self.names.clear()
        self.lifecycle.conns.clear()
        return out

    # --- consumer identity ----------------------------------------------------------------

    def _name_taken(self, c: Conn, pdu, out) -> None:
        """The server accepted ``c``'s DcpOpen: the name is ``c``'s on that server and bucket;
        a connection that held it is disconnected by the server, its streams end here
        (dcpconnmap.cc DcpConnMap::newProducer / newConsumer)."""
        name = c.negotiation.name
        if name is None:
            return
        ident = (name, c.negotiation.bucket)
        holders = self.names.get(ident)
        if holders is None:
            if len(self.names) >= bounds.MAX_RESUME:
                del self.names[next(iter(self.names))]
            holders = self.names[ident] = {}
        old = self.conns.get(holders.get(c.server[0], c.id))
        if old is not None and old is not c:
            for st in old.streams.values():
                self._end_stream(old, st, out)
            old.stream_requests.clear()
        holders[c.server[0]] = c.id

    def _release_name(self, c: Conn) -> None:
        ident = (c.negotiation.name, c.negotiation.bucket)
        holders = self.names.get(ident)
        if holders is not None and holders.get(c.server[0]) == c.id:
            del holders[c.server[0]]
            if not holders:
                del self.names[ident]

    # --- the consumer's requests and the producer's responses -----------------------------

    def _consumer_request(self, c: Conn, pdu, msg, out) -> None:
        op = msg.opcode
        if op == MARKER:
            self.snapshots.on_consumer_marker(c, pdu, msg, out)
        elif op == STREAM_REQUEST and "start_seqno" in msg.fields:
            self._open_stream(c, pdu, msg, out)

    def _open_stream(self, c: Conn, pdu, msg, out) -> None:
        neg = c.negotiation
        if msg.value_cut and (neg.unseen or neg.controls.get("enable_stream_id") == "true"):
            return          # its sid (in the value the capture cut) may name the stream
        request = dict(msg.fields)
        request["filtered"] = bool(msg.value_len)   # a JSON value: collection filter, sid, ...
        sid = None
        if msg.value_len and not msg.value_cut:
            try:
                sid = json.loads(bytes(msg.value)).get("sid")
            except (ValueError, AttributeError, RecursionError):
                sid = None
            if type(sid) is not int or not 0 <= sid <= 0xFFFF:
                sid = None          # the server rejects anything but a 16-bit id
        key = (msg.vbucket, sid)
        st = Stream(c.id, msg.vbucket, sid, msg.opaque, request, pdu)
        old = c.streams.get(key)
        if old is not None and old.active:
            self._end_stream(c, old, out)
        elif old is None and len(c.streams) >= bounds.MAX_STREAMS:   # forget the oldest
            self._end_stream(c, c.streams.pop(next(iter(c.streams))), out)
        c.streams[key] = st
        c.untracked_streams.discard(key)
        if len(c.stream_requests) >= bounds.MAX_PENDING:   # never answered: forget the oldest
            del c.stream_requests[next(iter(c.stream_requests))]
        c.stream_requests[msg.opaque] = st
        self._moved(c, key, out)
        self.correlation.on_stream_request(c, st)
        self.resume.on_stream_request(c, st, pdu, msg, out)

    def _moved(self, c: Conn, key, out) -> None:
        """The consumer asks for a vbucket on another connection (another node after a
        rebalance or failover, 11207 after 11210): its stream there has ended, whether or
        not the capture shows that connection ending (a failed node sends no FIN)."""
        for cid in self.names.get((c.negotiation.name, c.negotiation.bucket), {}).values():
            other = self.conns.get(cid)
            if other is not None and other is not c:
                st = other.streams.get(key)
                if st is not None and st.active:
                    self._end_stream(other, st, out)

    def _producer_response(self, c: Conn, pdu, msg, out) -> None:
        if msg.opcode == STREAM_REQUEST:
            st = c.stream_requests.pop(msg.opaque, None)
            if st is None:
                return
            st.response_status = msg.status
            if msg.status == STATUS_SUCCESS:
                st.active = True
            elif msg.status == STATUS_ROLLBACK:
                c.stream_requests[msg.opaque] = st     # the consumer may re-request (same opaque)

    # --- the producer's stream messages ---------------------------------------------------

    def _stream_message(self, c: Conn, pdu, msg, out) -> None:
        key = (msg.vbucket, msg.stream_id)
        st = c.streams.get(key)
        if st is not None and msg.opaque != st.opaque and self._replaced(c, st, pdu):
            st = None                           # a request the capture hid replaced it
        if st is None and msg.opcode == MARKER and "end_seqno" in msg.fields:
            st = self._implicit_stream(c, key, pdu, msg, out)
        if st is None:
            self.snapshots.not_judged(pdu, msg, "unknown")
            self._untracked(c, key, pdu, msg, out, "stream rules are not applied to it "
                            "until a snapshot marker is captured")
            return
        if not st.active:
            self.snapshots.not_judged(pdu, msg)
            return
        if msg.opaque != st.opaque:             # not the stream's message after all
            if st.request is not None:          # implicit: the opaque was only inferred
                self.correlation.on_foreign_opaque(st, pdu, msg, out)
            self.snapshots.not_judged(pdu, msg)
            return
        self.snapshots.on_stream_message(st, pdu, msg, out)
        op = msg.opcode
        if op == MARKER:
            self.correlation.on_marker(c, st, pdu)
        elif op == STREAM_END:
            self._end_stream(c, st, out)

    def _replaced(self, c: Conn, st: Stream, pdu) -> bool:
        """A message of ``st``'s vbucket with another opaque: after a cut of the consumer's
        direction it belongs to a stream the capture did not show being requested. The old
        stream ends (where it stopped is uncertain)."""
        since = st.request_pdu.ts_ns if st.request_pdu is not None else -1
        if not c.cut_between(1 - c.producer_direction, since, pdu.ts_ns):
            return False
        st.cut = True
        self._end_stream(c, st, [])
        del c.streams[(st.vb, st.sid)]
        return True

    def _untracked(self, c: Conn, key, pdu, msg, out, what: str) -> None:
        """Said once per (vbucket, stream id): no request seen for it."""
        if key in c.untracked_streams or len(c.untracked_streams) >= bounds.MAX_STREAMS:
            return
        c.untracked_streams.add(key)
        why = ("the capture started inside the connection" if c.mid_stream
               else "a cut hid it" if c.cuts else "it was not captured")
        out.append(finding_for(SEMANTICS_SUPPRESSED.id, f"no stream request seen for vb "
                               f"{msg.vbucket} on this connection ({why}): {what}", pdu, msg))

    def _implicit_stream(self, c: Conn, key, pdu, msg, out) -> Stream | None:
        """A producer's marker for a stream whose request was not captured: open the stream
        here (``request`` None) so that the rules needing only markers apply from it on."""
        if len(c.streams) >= bounds.MAX_STREAMS:
            return None
        self._untracked(c, key, pdu, msg, out, "from this snapshot marker on only the rules "
                        "that need no stream request are applied (not the first-marker "
                        "conventions, resume or correlation)")
        st = c.streams[key] = Stream(c.id, msg.vbucket, msg.stream_id, msg.opaque, None, None)
        st.active = True
        return st

    def _end_stream(self, c: Conn, st: Stream, out) -> None:
        if st.ended:
            return
        st.ended = True
        if st.active:
            self.snapshots.on_stream_end(st, out)
            self.resume.on_stream_end(c, st)
        self.durability.on_stream_end(c, st)
        st.active = False

    def _cut(self, c: Conn, cut: Cut, ev, why: str) -> list[Finding]:
        """Record a cut and make uncertain what it could have hidden (see the module)."""
        cuts = c.cuts
        d = cut.direction
        same = [k for k in cuts if k.direction == d]
        if len(same) >= MAX_CUTS:           # merge the two oldest: one wider, safe interval
            same[0].until_ts = same[1].until_ts
            cuts.remove(same[1])
        cuts.append(cut)
        if d == c.producer_direction:
            for st in c.streams.values():
                st.cut = True
                self.snapshots.on_cut(st)
            self.correlation.on_cut(c)
            self.lifecycle.on_producer_cut(c)
            self.durability.on_producer_cut(c)
        self.controls.on_cut(c, d != c.producer_direction)
        self.flow.on_cut(c, d != c.producer_direction)
        if c.cut_said:
            return []
        c.cut_said = True
        return [Finding(SEMANTICS_SUPPRESSED.id, f"{why}: each stream's snapshot rules resume "
                        "at its next marker; rules that need a message the cut may have hidden "
                        "are not applied", ev.frame, (ev.frame,), ev.ts_ns, ev.conn)]


MAX_CUTS = 32            # cuts remembered per connection and direction (older ones merge)
